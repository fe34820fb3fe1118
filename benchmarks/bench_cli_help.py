"""Cold `kinetic-tui --help` vs `python -c "import click"`: the CLI must import the cloud SDKs, textual and
the backends lazily. Both are fresh interpreters, interleaved, medians. Goal <= 3x."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

ROUNDS = 21


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    cli = [sys.executable, "-m", "kinetic_tui", "--help"]
    click = [sys.executable, "-c", "import click"]
    cand, base = [], []
    for _ in range(ROUNDS):
        base.append(timed(click))
        cand.append(timed(cli))
    b, c = statistics.median(base) * 1000, statistics.median(cand) * 1000
    print(f"python -c 'import click': {b:.1f} ms   kinetic-tui --help: {c:.1f} ms   (medians of {ROUNDS})")
    print(f"ratio {c / b:.2f}x  goal <= 3x")


if __name__ == "__main__":
    main()
