"""Cold `kinetic-tui jobs list` on a home with a few jobs vs `python -c "import cloudpickle"`: a read command
must not import the serving, pipeline or TUI machinery it does not use. Both are fresh interpreters,
interleaved, medians."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _workspace import fresh_workspace, user_module

ROUNDS = 15
JOBS = 3
CLI = str(Path(sys.executable).with_name("kinetic-tui"))


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=os.environ)
    return time.perf_counter() - start


def main() -> None:
    fresh_workspace("kinetic-bench-cli-start-")
    remote_square = user_module().remote_square
    for n in range(JOBS):
        assert remote_square(n) == n * n
    cli = [CLI, "jobs", "list"]
    floor = [sys.executable, "-c", "import cloudpickle"]
    cand, base = [], []
    for _ in range(ROUNDS):
        base.append(timed(floor))
        cand.append(timed(cli))
    b, c = statistics.median(base) * 1000, statistics.median(cand) * 1000
    print(f"python -c 'import cloudpickle': {b:.1f} ms   kinetic-tui jobs list ({JOBS} jobs): {c:.1f} ms")
    print(f"ratio {c / b:.2f}x  (medians of {ROUNDS}, load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
