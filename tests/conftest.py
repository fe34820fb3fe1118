"""Suite-wide fixtures: every test gets its own KINETIC_HOME; property tests draw fresh inputs each run from
one recorded seed, printed at the end of the run so a failure replays with `--hypothesis-seed`."""

import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, core, settings

from kinetic_tui.core import cleanup_later
from kinetic_tui.core.supervisor.loop import LINGER_ENV
from tests.helpers import processes

pytest_plugins = ["tests.gcs_emulator"]

settings.register_profile(
    "ci",
    deadline=None,
    print_blob=True,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SEED_OPTION = "--hypothesis-seed"


def pytest_configure(config: pytest.Config) -> None:
    """Without `--hypothesis-seed`, pick one: every run explores new inputs, and the seed is on record. The
    xdist workers get the controller's options, so they run under the seed it printed."""
    if config.getoption(SEED_OPTION) is None:
        config.option.hypothesis_seed = str(random.SystemRandom().randrange(2**32))
    core.global_force_seed = int(config.option.hypothesis_seed)


# Files whose tests drive many processes for long (a chaos run, consoles in tmux, whole scenarios, kills at
# random moments, studies resumed): they run one after another on one xdist worker, never two at once on
# two cores, while the other worker takes the rest.
SERIAL = {
    "chaos/test_chaos.py",
    "tui/test_tmux.py",
    "tui/test_tmux_tasks.py",
    "test_demo.py",
    "test_examples.py",
    "gke/test_gke_pipeline.py",
    "gke/test_gke_debug.py",
    "test_store_crash.py",
    "pipelines/test_durable_runs.py",
    "test_study_trials.py",
    "test_tuning_runs.py",
    "test_training_runs.py",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `--dist loadgroup` (the default, see pyproject.toml): each file's tests stay on one worker (its
    module fixtures are built once), and the SERIAL files share one."""
    root = Path(__file__).parent
    for item in items:
        path = item.path.relative_to(root).as_posix()
        item.add_marker(pytest.mark.xdist_group("serial" if path in SERIAL else path))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seed = terminalreporter.config.getoption(SEED_OPTION)
    terminalreporter.write_line(f"hypothesis seed {seed}: replay a failure with pytest {SEED_OPTION}={seed}")


@pytest.fixture(autouse=True)
def kinetic_home(tmp_path_factory, monkeypatch):
    """Point KINETIC_HOME (and XDG_CONFIG_HOME) at fresh temp dirs and clear KINETIC_* so the user's config
    never leaks in; afterwards stop the supervisor and the fork server, and fail the test if any process of
    ours is still serving its home a moment later (a job, a lane, a client): a suite run leaves nothing
    behind. A test
    that points KINETIC_HOME elsewhere (an overriding fixture: the tmux test's demo workspace) has the home
    it ended with judged too."""
    home = tmp_path_factory.mktemp("kinetic-home")
    outer = os.environ.get("KINETIC_HOME")  # a session fixture's home (the served workspace), or none
    for name in list(os.environ):
        if name.startswith("KINETIC_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KINETIC_HOME", str(home))
    # a supervisor exits as soon as nothing is due, as the tests of its exit expect; the linger has its own
    monkeypatch.setenv(LINGER_ENV, "0")
    # the console's own config file (keymap, theme) is the test's to write, never the user's
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    yield home
    cleanup_later.drain()  # a test's deferred cleanups run in its own home, before its processes are judged
    # a test that undid the suite's patches (monkeypatch.undo()) ends on the outer home: never stop that one
    undone = outer is not None and os.environ.get("KINETIC_HOME") == outer
    ended = home if undone else Path(os.environ.get("KINETIC_HOME") or home)
    left = {}
    for served in dict.fromkeys([home, ended]):
        processes.stop_infrastructure(served)
        left.update(processes.reap(served, LEFTOVER_GRACE))
    if undone:
        pytest.fail(
            f"the test undid the suite's KINETIC_HOME (monkeypatch.undo()), back to {outer}: patch inside "
            "`with monkeypatch.context()` instead",
            pytrace=False,
        )
    if left:
        pytest.fail(
            "the test left processes of ours running (killed now): "
            + "; ".join(f"{pid} {cmd}" for pid, cmd in left.items()),
            pytrace=False,
        )


# The supervisor and the fork server are stopped for the test; a job it left running has this long to end.
LEFTOVER_GRACE = 3.0
