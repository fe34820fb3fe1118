"""Parsing a 1,000-line `--script` vs running the same 1,000 actions as direct API calls.

The script is 1,000 `observe EP 42 --tick T` lines; the direct side makes 1,000 `Endpoint.observe` calls.
A second anchor, 1,000 `shlex.split` calls, shows what tokenising alone costs with the stdlib. Rounds
interleave the three and report medians. Goal: the whole script parses in <= 5 ms (a few microseconds a
line), so parsing never dominates a script's run time.
Run: /tmp/venv/bin/python benchmarks/bench_parse.py
"""

from __future__ import annotations

import shlex
import statistics
import time
from collections.abc import Callable

from kinetic_tui.core.commands import parse_script
from kinetic_tui.core.platform.autoscaling import Endpoint

LINES, ROUNDS, GOAL_MS = 1_000, 31, 5.0
SCRIPT_LINES = [f"observe EP 42 --tick {tick}" for tick in range(LINES)]
SCRIPT = "\n".join(SCRIPT_LINES)


def parse() -> None:
    assert len(parse_script(SCRIPT)) == LINES


def direct_calls() -> None:
    endpoint = Endpoint("EP")
    for tick in range(LINES):
        endpoint.observe(42, tick)


def shlex_split() -> None:
    for line in SCRIPT_LINES:
        shlex.split(line)


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    samples: dict[str, list[float]] = {"parse_script": [], "direct observe calls": [], "shlex.split": []}
    actions = dict(zip(samples, (parse, direct_calls, shlex_split)))
    for _ in range(ROUNDS):
        for name, action in actions.items():
            samples[name].append(timed(action))
    medians = {name: statistics.median(times) for name, times in samples.items()}
    for name, median in medians.items():
        print(f"{name:>22}: {median:7.3f} ms per {LINES} lines ({LINES / median * 1000:,.0f} lines/s)")
    parse_ms = medians["parse_script"]
    print(f"parse_script / direct calls: {parse_ms / medians['direct observe calls']:.2f}x")
    print(f"parse_script / shlex.split : {parse_ms / medians['shlex.split']:.2f}x")
    verdict = "met" if parse_ms <= GOAL_MS else "MISSED"
    print(f"goal: parse {LINES} lines in <= {GOAL_MS} ms: {verdict} ({parse_ms:.3f} ms)")


if __name__ == "__main__":
    main()
