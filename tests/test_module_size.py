"""Modules stay small enough to read in one sitting: none over 500 lines, except the runner, which ships to
a pod as a single file and so cannot be split."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500
SINGLE_FILE = {ROOT / "runner" / "remote_runner.py"}


def test_no_module_is_over_the_limit() -> None:
    sizes = {
        path: len(path.read_text().splitlines())
        for folder in ("core", "infra", "runner", "kinetic_tui")
        for path in (ROOT / folder).rglob("*.py")
    }
    assert len(sizes) > 100  # the walk found the packages
    over = sorted(
        f"{path.relative_to(ROOT)} ({lines})"
        for path, lines in sizes.items()
        if lines > LIMIT and path not in SINGLE_FILE
    )
    assert not over, f"modules over {LIMIT} lines: {', '.join(over)}"
