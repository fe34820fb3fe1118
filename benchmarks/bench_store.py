"""Benchmark: 10k registry transitions through the store vs 10k bare sqlite3 INSERT transactions.

Candidate: `registry.transition(...)` inside `store.transaction()`, one transaction each; the store's
listener writes the history row and updates the version's stage (two statements) after the registry's
validation. Baseline: a plain sqlite3 connection doing BEGIN IMMEDIATE; one single-row INSERT; COMMIT.
Fair comparison: both use a fresh file in the same directory, WAL journal, synchronous=NORMAL, an
autocommit connection with explicit BEGIN IMMEDIATE/COMMIT, the same number of commits. Runs are
interleaved and repeated; medians are reported. Goal: candidate <= 2x baseline.
"""

from __future__ import annotations

import itertools
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kinetic_tui.core.store import Store

N = 10_000
REPEATS = 5
GOAL = 2.0
CYCLE = ("Staging", "Production", "Archived", "None")  # every step is an allowed edge, no auto-archive


def candidate(path: Path) -> float:
    with Store(path) as store:
        registry = store.registry.load_registry(clock=itertools.count().__next__)
        with store.transaction():
            registry.register("fraud", "hash-1")
        stages = itertools.cycle(CYCLE)
        start = time.perf_counter()
        for _ in range(N):
            with store.transaction():
                registry.transition("fraud", 1, next(stages))
        elapsed = time.perf_counter() - start
        assert len(registry.history("fraud")) == N
        assert store.query("SELECT COUNT(*) FROM model_transitions")[0][0] == N
    return elapsed


def baseline(path: Path) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, version INTEGER, stage TEXT, at REAL)")
    start = time.perf_counter()
    for n in range(N):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO events (version, stage, at) VALUES (?, ?, ?)", (1, CYCLE[n % 4], float(n)))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def main() -> None:
    times: dict[str, list[float]] = {"store": [], "sqlite3": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(REPEATS):
            for name, fn in (("store", candidate), ("sqlite3", baseline))[:: 1 if repeat % 2 else -1]:
                times[name].append(fn(Path(tmp) / f"{name}-{repeat}.db"))
    store_t, base_t = statistics.median(times["store"]), statistics.median(times["sqlite3"])
    ratio = store_t / base_t
    print(f"{N} one-transaction actions, WAL + synchronous=NORMAL, medians of {REPEATS} interleaved runs")
    print(f"  store   (registry.transition in store.transaction): {store_t:.3f} s  ({store_t / N * 1e6:.1f} us/op)")
    print(f"  sqlite3 (BEGIN IMMEDIATE; 1-row INSERT; COMMIT):     {base_t:.3f} s  ({base_t / N * 1e6:.1f} us/op)")
    print(f"  ratio {ratio:.2f}x (goal <= {GOAL:g}x): {'met' if ratio <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
