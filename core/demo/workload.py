"""The user functions the demo's jobs run (`kinetic_tui.core.demo.workload:NAME`), shipped and run like any user code.

They exist to give the console something real to show: log lines that arrive over a few seconds, a remote
traceback several frames deep, a multi-host slice whose hosts each report, and a job that keeps running
while someone looks at it. Every result is a deterministic function of the arguments, so a demo reads the
same each time.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from kinetic_tui.core.serving.model import builtin_predict

INFERENCE_SECONDS = 0.005


def _log(message: str) -> None:
    """Flushed at once: the console streams the job's log file while the job runs."""
    print(message, flush=True)


def crunch(name: str, steps: int = 8, delay: float = 0.4) -> dict[str, Any]:
    """A small "training-like" loop: one log line per step, a decaying loss, a summary as the result."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    loss = 1.0
    _log(f"[{name}] starting {steps} steps as job {os.environ.get('KINETIC_JOB_ID', '?')}")
    for step in range(1, steps + 1):
        time.sleep(delay)
        loss *= 0.8 + 0.05 * math.sin(step)
        _log(f"[{name}] step {step}/{steps} loss={loss:.4f}")
    _log(f"[{name}] done")
    return {"name": name, "steps": steps, "loss": round(loss, 6)}


def _parse_record(record: dict[str, Any]) -> float:
    return float(record["amount"])


def _score_batch(records: list[dict[str, Any]]) -> list[float]:
    return [_parse_record(record) / 100 for record in records]


def score_corrupt_batch(delay: float = 0.3) -> list[float]:
    """Fails in the `execute` phase with a KeyError three frames down: what a remote traceback looks like."""
    records = [{"amount": 12.5}, {"amount": 80.0}, {"amnt": 3.0}]  # the third record misspells its field
    _log(f"scoring a batch of {len(records)} records")
    time.sleep(delay)
    return _score_batch(records)


def all_reduce(values: int = 4, delay: float = 0.3) -> dict[str, Any]:
    """One process per host of a multi-host slice (TPU_WORKER_ID); each logs its shard, host 0's result wins."""
    host = int(os.environ.get("TPU_WORKER_ID", "0") or 0)
    shard = [host * values + i for i in range(values)]
    _log(f"host {host}: shard {shard}")
    time.sleep(delay)
    _log(f"host {host}: partial sum {sum(shard)}")
    return {"host": host, "partial_sum": sum(shard)}


def _workspace_wiped() -> bool:
    """The job runs inside its work directory in the workspace; once that is deleted the cwd is gone."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def stream_metrics(duration: float = 120.0, interval: float = 0.5) -> int:
    """A long-running job: one metrics line every `interval` s for `duration` s, so the jobs view has a
    RUNNING job whose log keeps growing; the default SIGTERM handling makes `cancel` end it at once, and it
    stops early when a new demo wipes the workspace, so an old demo's job never outlives its workspace."""
    lines = max(1, math.ceil(duration / interval))
    for tick in range(1, lines + 1):
        if _workspace_wiped():
            _log("the demo workspace was wiped (a new demo started): stopping")
            return tick - 1
        _log(f"tick {tick}/{lines}: requests/s={100 + 40 * math.sin(tick / 5):.1f} p99_ms={20 + tick % 7}")
        time.sleep(interval)
    return lines


def score(state: Any, record: Any) -> dict[str, Any]:
    """The demo endpoint's predict: the built-in model's score after a small model's inference time. The
    built-in predict alone answers in microseconds, so the demo's load pattern would keep only a few
    requests at the router at once and its autoscaler would have little to react to."""
    time.sleep(INFERENCE_SECONDS)
    return builtin_predict(state, record)
