"""Where the workspace lives on disk (SPEC 1): one home directory, private to the user."""
from __future__ import annotations

import os
from pathlib import Path

# The folder that holds core/, runner/ and infra/: the checkout root in a source tree, the installed
# `kinetic_tui` package otherwise. The runner is shipped and started as a file found from here.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
RUNNER_FILE = PACKAGE_DIR / "runner" / "remote_runner.py"


def kinetic_home() -> Path:
    """Return `KINETIC_HOME` (default `~/.kinetic`), creating it with mode 0700 on first use."""
    home = Path(os.environ.get("KINETIC_HOME") or Path.home() / ".kinetic").expanduser()
    if not home.exists():
        home.mkdir(parents=True, mode=0o700)
        home.chmod(0o700)  # mkdir's mode is filtered by the umask
    return home


def state_db_path() -> Path:
    return kinetic_home() / "state.db"


def local_root() -> Path:
    """Root of the local backend: buckets and per-job working directories."""
    path = kinetic_home() / "local"
    path.mkdir(exist_ok=True)
    return path
