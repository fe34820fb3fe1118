"""Suite-wide fixtures: every test gets its own KINETIC_HOME; hypothesis runs deterministically."""

import os

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.gcs_emulator"]

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def kinetic_home(tmp_path_factory, monkeypatch):
    """Point KINETIC_HOME at a fresh temp dir and clear KINETIC_* so the user's config never leaks in;
    afterwards stop the fork server the test's jobs started, so a suite run leaves no daemons behind."""
    home = tmp_path_factory.mktemp("kinetic-home")
    for name in list(os.environ):
        if name.startswith("KINETIC_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KINETIC_HOME", str(home))
    yield home
    if (home / "run" / "forkserver.sock").exists():  # a test that ran jobs: stop its home's fork server now
        from kinetic_tui.core.backends.local import launcher  # rather than leave it idling for ten minutes

        launcher.shutdown_server()
