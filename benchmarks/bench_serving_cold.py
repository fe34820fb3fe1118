"""A hit against a miss: one request to a version the instance holds loaded, against one to a version it
must load first (its trained state from the artifact store and its predict). The instance keeps one
version loaded, so alternating two versions makes every request a miss.

Reported (no goal): the median latency of each, over the same client and run, and the load times the
instance measured.
Run: python benchmarks/bench_serving_cold.py
"""

from __future__ import annotations

import json
import time
import urllib.request

from _serving import load_average, median, run, served_workspace, stop_workspace

ROUNDS = 40


def call(url: str, token: str, model: str) -> float:
    request = urllib.request.Request(
        url,
        data=json.dumps({"record": {"x": 1}, "model": model}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as answer:
        answer.read()
    return time.perf_counter() - start


def main() -> None:
    url, token = served_workspace("--min 1 --max 1 --tick-seconds 0 --max-loaded-models 1", versions=2)
    try:
        call(url, token, "g:v1")
        hits = [call(url, token, "g:v1") for _ in range(ROUNDS)]
        misses = [call(url, token, f"g:v{1 + i % 2}") for i in range(1, ROUNDS + 1)]
        deadline = time.monotonic() + 10
        loads: list[float] = []
        while time.monotonic() < deadline and len(loads) < ROUNDS:
            events = run("show endpoint bench")["serving"]["cache_events"]
            loads = [e["seconds"] for e in events if e["kind"] == "load"]
            time.sleep(0.2)
    finally:
        stop_workspace()
    print(f"hit:  median {median(hits) * 1000:.2f} ms over {len(hits)} requests")
    print(f"miss: median {median(misses) * 1000:.2f} ms over {len(misses)} requests (a load each)")
    if loads:
        print(f"load time measured by the instance: median {median(loads) * 1000:.2f} ms over {len(loads)} loads")
    print(f"miss / hit {median(misses) / median(hits):.2f}; load average {load_average()}")


if __name__ == "__main__":
    main()
