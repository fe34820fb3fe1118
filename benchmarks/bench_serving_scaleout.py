"""Scale-out reaction: from a step up in load to the new instance answering requests.

The endpoint ticks every second (target 5 per instance, scale-out cooldown 3 ticks); a light load runs
first, then the load steps to 30 requests in flight and the clock runs until the router has had an answer
from a second instance. The step comes 3 ticks after a scale-in, so the cooldown binds: the worst case.
Goal: <= scale-out cooldown + 2 s (5 s).
Run: python benchmarks/bench_serving_scaleout.py
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from typing import Any

from _serving import _drive, load_average, run, served_workspace, stop_workspace

COOLDOWN = 3
GOAL = COOLDOWN + 2.0


def describe(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(url.removesuffix("/invoke"), headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def answering(url: str, token: str) -> int:
    return sum(1 for counts in describe(url, token)["cache"].values() if counts["hits"] + counts["misses"])


def main() -> None:
    url, token = served_workspace(f"--min 1 --max 2 --target 5 --scale-out-cooldown {COOLDOWN} --scale-in-cooldown 1")
    try:
        asyncio.run(_drive(url, token, 1, 1.5, {"record": {"x": 1}}))
        run("scale bench --min 2")  # a second instance, then back to 1: the scale-in stamps the cooldown clock
        run("scale bench --min 1")
        deadline = time.monotonic() + 30
        while not any(e["action"] == "scale_in" for e in run("show endpoint bench")["history"]):
            if time.monotonic() > deadline:
                raise RuntimeError("the endpoint did not scale in")
            asyncio.run(_drive(url, token, 1, 0.2, {"record": {"x": 1}}))
        baseline = answering(url, token)
        step = time.monotonic()
        load = threading.Thread(target=lambda: asyncio.run(_drive(url, token, 30, 15.0, {"record": {"x": 1}})))
        load.start()
        reacted = None
        first = set(describe(url, token)["instances"])
        while time.monotonic() - step < 15:
            shown = describe(url, token)
            fresh = [i for i, c in shown["cache"].items() if i not in first and c["hits"] + c["misses"]]
            if fresh:
                reacted = time.monotonic() - step
                break
            time.sleep(0.05)
        load.join()
    finally:
        stop_workspace()
    print(f"instances answering before the step: {baseline}")
    if reacted is None:
        print("no new instance answered within 15 s: NOT met")
    else:
        verdict = "met" if reacted <= GOAL else "NOT met"
        print(f"step to new instance answering: {reacted:.2f} s (goal <= {GOAL:.0f} s): {verdict}")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
