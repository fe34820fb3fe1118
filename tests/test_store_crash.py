"""Crash safety: SIGKILL a process doing random store actions at random moments, 20 times on one file.

After every kill the file must pass `PRAGMA integrity_check`, hold every acknowledged action, and hold no
half action: each action wrote a marker row in its own transaction, so every effect must have its marker
and every marker its effects (tests/helpers/store_crash_worker.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kinetic_tui.core.store import Store

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "store_crash_worker.py"
ROUNDS = 20


def run_and_kill(seed: int, delay: float) -> list[int]:
    """Start the worker, let it act for `delay` seconds after it is ready, SIGKILL it; the acked ids."""
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    ready = worker.stdout.readline()
    assert ready == "ready\n", worker.stderr.read()
    time.sleep(delay)
    worker.send_signal(signal.SIGKILL)
    # read through the same buffered pipe as readline (communicate() would skip what it buffered)
    out, err = worker.stdout.read(), worker.stderr.read()
    assert worker.wait(timeout=30) == -signal.SIGKILL, err
    return [int(line) for line in out.split()]


def check_consistent(store: Store, acked: list[int]) -> int:
    """Every acknowledged action is there, and every stored effect belongs to a committed action."""
    assert store.query("PRAGMA integrity_check") == [("ok",)]
    markers = {
        marker_id: (kind, json.loads(detail))
        for marker_id, kind, detail in store.query("SELECT id, kind, detail FROM crash_markers")
    }
    assert set(acked) <= set(markers)
    kinds = Counter(kind for kind, _ in markers.values())

    assert store.query("SELECT COUNT(*) FROM model_versions")[0][0] == kinds["register"]
    stage = {}  # each version's history must chain: every from_stage is the previous to_stage
    rows = store.query("SELECT group_name, version, from_stage, to_stage FROM model_transitions ORDER BY seq")
    for group, version, from_stage, to_stage in rows:
        assert stage.get((group, version), "None") == from_stage
        stage[group, version] = to_stage
    assert len(rows) == sum(d["rows"] for kind, d in markers.values() if kind == "transition")

    scaling = {seq for (seq,) in store.query("SELECT seq FROM scaling_events WHERE endpoint = 'api'")}
    assert scaling == {d["seq"] for kind, d in markers.values() if kind == "observe"}
    jobs = dict(store.query("SELECT name, status FROM training_jobs"))
    assert jobs == {d["name"]: "Completed" for kind, d in markers.values() if kind == "train"}
    cache = set(store.pipelines.cache)
    assert cache == {d["key"] for kind, d in markers.values() if kind == "cache"}

    store.registry.load_registry()  # restore re-validates the graph and the single Production per group
    if scaling:
        store.endpoints.get("api")
    return len(markers)


def test_sigkill_at_random_moments_never_loses_or_halves_an_action():
    rng = random.Random(20240611)
    total = 0
    acked_total = 0
    for round_number in range(ROUNDS):
        acked = run_and_kill(seed=round_number, delay=rng.uniform(0.02, 0.3))
        acked_total += len(acked)
        with Store() as store:
            count = check_consistent(store, acked)
        assert count <= total + len(acked) + 1  # at most one committed action missed its ack
        total = count
    assert acked_total > ROUNDS  # the kills really landed amid a stream of actions
