"""The chaos test's endpoints: two endpoints serving a model whose predict marks every request it serves,
invoked over HTTP by threads of the test while routers and instances are killed and stopped.

- `chaos-fixed` (2 instances, `--tick-seconds 0`: its autoscaler decides only from `observe`, so its
  decision stays 2 whatever the load), and `chaos-auto` (1 to 3 instances, target 1, the controller ticking
  every second from the load the invokers make).
- Ground truth: the predict writes `{req}.{pid}.start` and `.end` (in `Project.requests`) in the instance that
  serves the request; each invoker records, per request, when it was sent and answered and what came back.

What must hold (`check_requests`, `check_at_rest`):
- every request gets an answer: JSON with an HTTP status, or a refused/reset connection only while that
  endpoint's router was killed (by us) and not yet back; a request never hangs (the invoker's timeout);
- a request in flight on an instance we killed (started there, never ended) is answered 503 `InstanceLost`
  within `PROMPT` seconds of the kill; a request started on an instance nobody killed ends there;
- a 200 answer carries the request it was given (and the pid of an instance that marked it);
- at rest, each endpoint's router runs (restarted after every kill) and its live instance processes are as
  many as the autoscaler decided; then `endpoint stop` stops each, and no router or instance is left.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinetic_tui.core.serving.config import read_token
from tests.chaos.processes import alive
from tests.serving.served import Home

Add = Callable[[str, str], None]  # records a violation: (category, what)

GROUP, MODEL_TRAINING, POOL = "chaos-model", "chaos-model", "servepool"
ENDPOINTS = {  # name -> `endpoint create` flags
    "chaos-fixed": "--min 2 --max 2 --tick-seconds 0",
    "chaos-auto": "--min 1 --max 3 --target 1 --scale-out-cooldown 1 --scale-in-cooldown 2",
}
INVOKERS = 2  # threads per endpoint, each sending one request at a time
PROMPT = 10.0  # seconds within which a request in flight on a killed instance is answered 503
ROUTER_DOWN = 30.0  # seconds after a router kill in which its endpoint may refuse connections
CLIENT_TIMEOUT = 60.0  # longer than the router's own 30 s request timeout: reaching it is a hang


def serving_jobs(jobs: dict[str, dict[str, Any]]) -> set[str]:
    """The jobs of the serving side (the model's training, each endpoint's instances, named `serve NAME`):
    judged here, by what the endpoints answer, not by job markers."""
    names = {f"train {MODEL_TRAINING}"} | {f"serve {name}" for name in ENDPOINTS}
    return {job_id for job_id, row in jobs.items() if row.get("name") in names}


def start(home: Path, project: Path) -> Home:
    """The model (a one-epoch training registered with the project's predict) and the endpoints, each
    running once this returns; called from a thread while the rest of the workload starts."""
    served = Home(home, project)
    served.run(f"pool add {POOL} --accelerator l4x2 --nodes 6")
    trained = served.run(f"train {MODEL_TRAINING} --epochs 1")
    assert trained["status"] == "Completed", trained["error"]
    sys.path.insert(0, str(project))  # the predict's module is the project's; register archives it
    try:
        served.run(f"register {GROUP} --from-training {MODEL_TRAINING} --predict chaos_jobs:predict")
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("chaos_jobs", None)
    for name, flags in ENDPOINTS.items():
        served.run(f"endpoint create {name} --model {GROUP} --pool {POOL} {flags}")
    return served


@dataclass
class Invokers:
    """Threads invoking the endpoints until stopped, one request at a time each; every answer recorded."""

    served: Home
    rng: random.Random
    answers: list[dict[str, Any]] = field(default_factory=list)
    _halt: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for name in ENDPOINTS:
            url = f"http://127.0.0.1:{self.served.config(name).port}/v1/endpoints/{name}/invoke"
            token = read_token(name, self.served.home)
            for i in range(INVOKERS):
                rng = random.Random(self.rng.random())
                thread = threading.Thread(target=self._invoke, args=(name, i, url, token, rng), daemon=True)
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        self._halt.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT + 5)

    def _invoke(self, name: str, invoker: int, url: str, token: str, rng: random.Random) -> None:
        count = 0
        while not self._halt.is_set():
            req, count = f"{name}-{invoker}-{count}", count + 1
            record = {"req": req, "sleep": round(rng.uniform(0.05, 0.6), 3)}
            body = json.dumps({"record": record, "model": f"{GROUP}:v1"}).encode()
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            answer: dict[str, Any] = {"endpoint": name, "req": req, "sent": time.time()}
            try:
                request = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=CLIENT_TIMEOUT) as response:
                    answer.update(status=response.status, body=json.loads(response.read()))
            except urllib.error.HTTPError as error:
                answer.update(status=error.code, body=_json(error.read()))
            except (OSError, ValueError) as exc:  # refused, reset, timed out
                answer.update(status=None, error=f"{type(exc).__name__}: {exc}")
                time.sleep(0.1)  # a router being restarted: do not spin
            answer["answered"] = time.time()
            self.answers.append(answer)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def read_requests(directory: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """req -> {"start": marker, "end": marker} as the instances marked them."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for path in directory.iterdir():
        if path.suffix in (".start", ".end"):
            marker = json.loads(path.read_text())
            found.setdefault(marker["req"], {})[marker["kind"]] = marker
    return found


def check_requests(
    answers: list[dict[str, Any]],
    requests: dict[str, dict[str, dict[str, Any]]],
    faults: list[dict[str, Any]],
    add: Add,
) -> dict[str, Any]:
    """Judge every answer against the instances' markers and the faults; `add(category, what)` records a
    violation. Returns the figures of the report."""
    instance_kills = {f["pid"]: f for f in faults if f["kind"] == "instance" and f["signal"] == "KILL"}
    killed_instances = {j: f for f in instance_kills.values() for j in f["jobs"]}
    router_kills = [f for f in faults if f["kind"] == "router" and f["signal"] == "KILL"]
    figures: Counter[str] = Counter()
    slowest = 0.0
    for answer in answers:
        req, status, body = answer["req"], answer.get("status"), answer.get("body")
        marks = requests.get(req, {})
        figures["requests"] += 1
        if status is None:
            down = any(
                f["endpoint"] == answer["endpoint"] and answer["sent"] - ROUTER_DOWN <= f["t"] <= answer["answered"]
                for f in router_kills
            )
            figures["refused_router_down"] += 1
            if not down:
                add("serving", f"{req} got no HTTP answer ({answer['error']}) and no router of its endpoint was killed")
            continue
        if not isinstance(body, dict):
            add("serving", f"{req} answered {status} with a body that is not JSON")
            continue
        if status == 200:
            figures["ok"] += 1
            output = body.get("output", {})
            if output.get("req") != req or "end" not in marks or marks["end"]["pid"] != output.get("pid"):
                add("wrong-value", f"{req} answered 200 with {output} (markers {sorted(marks)})")
            continue
        kind = body.get("error", {}).get("type")
        figures[f"{status} {kind}"] += 1
        if status == 503 and kind == "InstanceLost":
            message = body["error"]["message"]
            kill = next((f for job, f in killed_instances.items() if job in message), None)
            if kill is None:
                add("serving", f"{req}: {message}, an instance nobody killed")
            elif "start" in marks and "end" not in marks:
                slowest = max(slowest, answer["answered"] - kill["t"])
        elif status == 504:
            add("serving", f"{req} hung: {body['error']['message']}")
    for req, marks in requests.items():
        if "end" in marks:
            continue
        kill = instance_kills.get(marks["start"]["pid"])
        answer = next((a for a in answers if a["req"] == req), None)
        if kill is None:
            add("serving", f"{req} started on instance pid {marks['start']['pid']} (not killed) and never ended")
        elif answer is None:
            add("serving", f"{req} was in flight on a killed instance and its invoker got no answer")
        elif answer.get("status") is None:
            continue  # its router was killed too: the connection broke (judged above)
        elif (answer["status"], (answer["body"] or {}).get("error", {}).get("type")) != (503, "InstanceLost"):
            add(
                "serving",
                f"{req} was in flight on killed pid {kill['pid']} and got {answer['status']} {answer['body']}",
            )
        elif answer["answered"] - kill["t"] > PROMPT:
            add(
                "serving",
                f"{req} in flight on a killed instance got its 503 {answer['answered'] - kill['t']:.1f} s late",
            )
        else:
            figures["in_flight_on_killed_503"] += 1
    figures["slowest_503_after_kill_ms"] = round(1000 * slowest)
    return dict(sorted(figures.items()))


def check_at_rest(served: Home, faults: list[dict[str, Any]], timeout: float, add: Add) -> dict[str, Any]:
    """Each endpoint comes back to what its autoscaler decided (its router restarted after every kill, as
    many live instances as its instance count), answers, then stops with nothing of it left running."""
    killed_routers = {f["pid"] for f in faults if f["kind"] == "router" and f["signal"] == "KILL"}
    figures: dict[str, Any] = {}
    pids: set[int] = set()  # the processes serving at rest (a faulted pid may be reused by now)
    for name in ENDPOINTS:
        deadline = time.monotonic() + timeout
        while True:
            snapshot = served.run(f"show endpoint {name}")
            serving = snapshot["serving"]
            live = [i for i in serving["instances"] if i["state"] == "ready" and i["pid"] and alive(i["pid"])]
            router = serving["router_pid"]
            settled = len(live) == len(serving["instances"]) == snapshot["instance_count"]
            if settled and router and alive(router) and router not in killed_routers and "live" in serving:
                break
            if time.monotonic() >= deadline:
                add(
                    "serving",
                    f"{name} did not come back: router {router}, instances {serving['instances']}, "
                    f"the autoscaler wants {snapshot['instance_count']}",
                )
                break
            time.sleep(0.3)
        pids |= {i["pid"] for i in serving["instances"] if i["pid"]} | ({router} if router else set())
        status, body = served.http(name, {"record": {"req": f"{name}-rest", "sleep": 0}, "model": f"{GROUP}:v1"})
        if status != 200:
            add("serving", f"{name} at rest answered {status} {body}")
        lost = served.events(name, "lost")
        figures[name] = {"instances": snapshot["instance_count"], "replaced": len(lost)}
        stopped = served.run(f"endpoint stop {name}")["serving"]
        if stopped["router_pid"] is not None or stopped["instances"]:
            add("serving", f"endpoint stop {name} left {stopped}")
    jobs = {row["job_id"]: row for row in served.run("jobs")}
    unsettled = sorted(j for j in serving_jobs(jobs) if jobs[j]["status"] in ("PENDING", "RUNNING"))
    if unsettled:
        add("serving", f"instance jobs still unsettled after every endpoint stopped: {unsettled}")
    left = sorted(pid for pid in pids if alive(pid))
    if left:
        add("leftover", f"router or instance processes still running after every endpoint stopped: {left}")
    return figures
