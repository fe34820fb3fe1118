"""Cold `kinetic-tui jobs list` on a home with a few jobs vs `python -c "import cloudpickle"`: a read command
must not import the serving, pipeline or TUI machinery it does not use. Both are fresh interpreters,
interleaved, medians."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from _workspace import fresh_workspace, interleaved_ms, user_module

ROUNDS = 15
JOBS = 3
CLI = str(Path(sys.executable).with_name("kinetic-tui"))


def main() -> None:
    from kinetic_tui.core.backends.local.launcher import shutdown_server

    fresh_workspace("kinetic-bench-cli-start-")
    remote_square = user_module().remote_square
    try:
        for n in range(JOBS):
            assert remote_square(n) == n * n
    finally:
        shutdown_server()  # the fork server the jobs started: nothing of the benchmark stays running
    cli = [CLI, "jobs", "list"]
    floor = [sys.executable, "-c", "import cloudpickle"]
    b, c = interleaved_ms(cli, floor, ROUNDS)
    print(f"python -c 'import cloudpickle': {b:.1f} ms   kinetic-tui jobs list ({JOBS} jobs): {c:.1f} ms")
    print(f"ratio {c / b:.2f}x  (medians of {ROUNDS}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
