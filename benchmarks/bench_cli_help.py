"""Cold `kinetic-tui --help` vs `python -c "import click"`: the CLI must import the cloud SDKs, textual and
the backends lazily. Both are fresh interpreters, interleaved, medians. Goal <= 3x."""

from __future__ import annotations

import sys

from _workspace import interleaved_ms

ROUNDS = 21


def main() -> None:
    cli = [sys.executable, "-m", "kinetic_tui", "--help"]
    click = [sys.executable, "-c", "import click"]
    b, c = interleaved_ms(cli, click, ROUNDS)
    print(f"python -c 'import click': {b:.1f} ms   kinetic-tui --help: {c:.1f} ms   (medians of {ROUNDS})")
    print(f"ratio {c / b:.2f}x  goal <= 3x")


if __name__ == "__main__":
    main()
