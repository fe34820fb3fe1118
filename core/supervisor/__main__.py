"""The queue watcher process of one home (`python -m kinetic_tui.core.supervisor`, see process.py)."""

from __future__ import annotations

import time

from kinetic_tui.core.paths import private_umask
from kinetic_tui.core.supervisor import process


def main() -> None:
    private_umask()
    # Pause before importing the backend (~0.1 s of CPU): the submitter usually keeps scheduling for a while.
    time.sleep(process.START_DELAY)
    from kinetic_tui.core.backends.local.workspace import local_backend

    process.watch(local_backend())


if __name__ == "__main__":
    main()
