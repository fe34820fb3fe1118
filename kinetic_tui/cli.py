"""Command-line entry point (placeholder until the console issue lands)."""
import sys


def main() -> None:
    sys.stderr.write("kinetic-tui: the console is not built yet; see README.md\n")
    sys.exit(2)
