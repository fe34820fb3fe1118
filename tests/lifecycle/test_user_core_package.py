"""A user project whose own top-level packages are named `core`, `infra` and `runner` uses the product.

The distribution installs only `kinetic_tui`, so the user's `core` never shadows ours (nor ours theirs): not
in the client, and not in the job processes, which import our training entry next to the user's code. The
client is a real process with the project as its cwd, as a user's script would run; every job is a real
runner process of the local backend.
"""

from __future__ import annotations

from pathlib import Path

from tests.lifecycle.run_projects import client_result, make_project, run_client

USER_PACKAGES = {
    "core/__init__.py": "OWNER = 'user'\n",
    "core/helpers.py": """
        def scale(x):
            return 100 * x + 7
    """,
    "core/steps.py": """
        from core.helpers import scale


        def train_step(hyperparameters, epoch, state):
            # not the product's default step: the loss falls by a fixed amount and the epoch is recorded
            loss = state.get("loss", 1.0) - hyperparameters["drop"]
            return {"loss": round(loss, 6), "epochs_seen": state.get("epochs_seen", 0) + 1, "tag": scale(epoch)}
    """,
    "infra/__init__.py": "",
    "infra/settings.py": "REGION = 'user-region'\n",
    "runner/__init__.py": "",
    "runner/tasks.py": """
        def offset():
            return 1
    """,
}

CLIENT = """
import asyncio
import json
import os
import sys

import kinetic_tui as kinetic

import core
import infra.settings
import runner.tasks
from core.helpers import scale


@kinetic.run()
def blocking(x):
    from core.helpers import scale

    return {"value": scale(x), "owner": __import__("core").OWNER, "pid": os.getpid()}


def mapped(x):
    import runner.tasks
    from core.helpers import scale

    return scale(x) + runner.tasks.offset()


async def train(home):
    from kinetic_tui.core.console import Console

    console = Console(home=home)
    try:
        service = console.training.service
        await asyncio.to_thread(service.start, "user-step", {"drop": 0.125}, 4, 1, None, step="core.steps:train_step")
        done = await asyncio.to_thread(service.wait, "user-step", 120)
    finally:
        await console.aclose()
    return {"status": done.status, "metric": done.metric, "step": done.step, "epoch": done.current_epoch,
            "error": done.error}


if __name__ == "__main__":
    ours = sys.modules["kinetic_tui.core"].__file__
    report = {
        "user_modules": [core.__file__, infra.settings.REGION, runner.tasks.__file__],
        "ours": ours,
        "owner": core.OWNER,
        "blocking": blocking(4),
        "mapped": kinetic.map(mapped, [1, 2, 3]).results(timeout=120),
        "training": asyncio.run(train(os.environ["KINETIC_HOME"])),
        "client_pid": os.getpid(),
    }
    print("RESULT " + json.dumps(report))
"""


def test_a_project_with_its_own_core_infra_and_runner_packages(tmp_path: Path, kinetic_home: Path) -> None:
    project = make_project(tmp_path / "userproj", {**USER_PACKAGES, "main.py": CLIENT})
    report = client_result(run_client(project, "main.py", env={"KINETIC_HOME": str(kinetic_home)}))

    resolved = project.resolve()
    assert report["owner"] == "user"
    assert Path(report["user_modules"][0]).resolve() == resolved / "core" / "__init__.py"
    assert report["user_modules"][1] == "user-region"
    assert Path(report["user_modules"][2]).resolve() == resolved / "runner" / "tasks.py"
    assert resolved not in Path(report["ours"]).resolve().parents  # our core is ours, not the user's

    assert report["blocking"]["value"] == 407 and report["blocking"]["owner"] == "user"
    assert report["blocking"]["pid"] != report["client_pid"]
    assert report["mapped"] == [108, 208, 308]

    training = report["training"]
    assert training["status"] == "Completed" and training["epoch"] == 4, training["error"]
    assert training["step"] == "core.steps:train_step"
    assert training["metric"] == 0.5  # 1.0 - 4 * 0.125: the user's step, not the default decaying loss
