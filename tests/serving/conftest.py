"""One served workspace for the serving tests: two trainings (the built-in step and a user step), versions
registered with their predicts, an endpoint `main` running; every process of it stopped at the end."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.serving.served import USER_PROJECT, Home


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    home = tmp_path_factory.mktemp("served-home")
    project = tmp_path_factory.mktemp("served-project")
    (project / "usermodel.py").write_text(USER_PROJECT)
    sys.path.insert(0, str(project))
    workspace = Home(home, project)
    patch = pytest.MonkeyPatch()
    patch.setenv("KINETIC_HOME", str(home))  # nothing of this fixture may reach the user's own home
    try:
        workspace.run("pool add srv --accelerator l4 --nodes 6")
        workspace.run("train base --epochs 2")
        trained = workspace.run("train user --epochs 3 --hp lr=0.5 --step usermodel:step")
        assert trained["status"] == "Completed", trained["error"]
        workspace.run("register g --from-training base")  # v1: the built-in predict
        workspace.run("register g --from-training user --predict usermodel:predict")  # v2
        workspace.run("register g --from-training user --predict usermodel:boom")  # v3
        workspace.run("register g --from-training user --predict usermodel:not_json")  # v4
        workspace.run("register g --from-training user --predict usermodel:slow")  # v5
        workspace.run("promote g 1 Staging")
        workspace.run("promote g 1 Production")
        workspace.run("endpoint create main --model g --max-loaded-models 2 --max 2")
        yield workspace
    finally:
        workspace.stop_everything()
        sys.path.remove(str(project))
        sys.modules.pop("usermodel", None)
        patch.undo()
