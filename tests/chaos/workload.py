"""The chaos test's workload: a user project whose job functions write the ground truth, its clients, and a
seeded plan of what each client submits.

Ground truth is written by the job functions themselves, one marker file per execution attempt, named by
the job id the runner gave the attempt (`KINETIC_JOB_ID`) and the process that ran it, so a second
execution of one job id can never overwrite the first: `{job}.{pid}.{ns}.start` when the function starts,
`.end` when it returns its value, `.raised` when it raises on purpose, `.epoch` once per training epoch.
Every marker holds JSON with the job id, the pid and process group that ran it, and the tag or epoch.

Pipeline runs (`PIPELINE`) are started detached from the CLI while the clients run, so the supervisor that
drives them (a fault target) is killed and stopped mid-run. Every step is a job whose function marks its
attempt like any job, tagged `{label}-{step}` with the run's `label` param, and returns a value that is a
function of the run's `n` param only (`expected_outputs`), so a run's results are checked against that.

The endpoints' predict (`predict`, registered from this project) marks every request it serves in
`Project.requests`, from the instance serving it (endpoints.py judges the answers against those marks).

Clients are separate `python` processes run from the project directory, as a user runs their script. Each
acknowledges what it was given, one fsynced JSON line per event in its own ack file, the moment the API
returned it: `{"op": "async", "job": ID}` (a durable handle), `{"op": "map", "group": ID, "jobs": [...]}`,
`{"op": "value", "job": ID, "value": ...}` (a blocking call or a result returned), `{"op": "raised", ...}`
(a call whose job raised on purpose), `{"op": "error", ...}` (anything else the API raised).
"""

from __future__ import annotations

import json
import random
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JOBS_MODULE = "chaos_jobs"
CLIENT_SCRIPT = "chaos_client.py"
PIPELINE = "chaos-pipe"
PIPELINE_STEPS = ("source", "double", "triple", "total")

JOBS_SOURCE = """
import json
import os
import time
from pathlib import Path

MARKERS = Path({markers!r})
REQUESTS = Path({requests!r})
STEP_SECONDS = {step_seconds!r}


def _write(directory, name, record):
    tmp = directory / (name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, directory / name)


def _mark(kind, **fields):
    job = os.environ.get("KINETIC_JOB_ID", "unknown")
    record = {{"job": job, "pid": os.getpid(), "pgid": os.getpgid(0), "kind": kind, "t": time.time(), **fields}}
    _write(MARKERS, f"{{job}}.{{os.getpid()}}.{{time.monotonic_ns()}}.{{kind}}", record)


def predict(state, record):  # the endpoints' predict, run by the instance serving the request
    req, pid = record["req"], os.getpid()
    _write(REQUESTS, f"{{req}}.{{pid}}.start", {{"req": req, "pid": pid, "kind": "start", "t": time.time()}})
    time.sleep(record["sleep"])
    _write(REQUESTS, f"{{req}}.{{pid}}.end", {{"req": req, "pid": pid, "kind": "end", "t": time.time()}})
    return {{"req": req, "pid": pid}}


def work(tag, seconds, fail=False):
    _mark("start", tag=tag)
    time.sleep(seconds)
    if fail:
        _mark("raised", tag=tag)
        raise ValueError(f"chaos job {{tag}} fails on purpose")
    value = {{"job": os.environ.get("KINETIC_JOB_ID"), "tag": tag}}
    _mark("end", tag=tag)
    return value


def step(hyperparameters, epoch, state):
    from kinetic_tui.core.platform.training import default_train_step

    _mark("epoch", epoch=epoch)
    time.sleep(STEP_SECONDS)
    return default_train_step(hyperparameters, epoch, state)
"""

PIPELINE_SOURCE = """

from kinetic_tui import Pipeline, Step

PIPE_SECONDS = 0.25


def _piece(name, compute):
    def step(inputs):
        tag = f"{inputs['label']}-{name}"
        _mark("start", tag=tag)
        time.sleep(PIPE_SECONDS)
        value = compute(inputs)
        _mark("end", tag=tag)
        return value
    return step


def chaos_pipeline():
    label = {"label": "source.label"}
    return Pipeline("chaos-pipe", [
        Step("source", _piece("source", lambda i: {"n": i["n"], "label": i["label"]}),
             {"n": "params.n", "label": "params.label"}),
        Step("double", _piece("double", lambda i: {"v": 2 * i["n"]}), {"n": "source.n", **label}),
        Step("triple", _piece("triple", lambda i: {"v": 3 * i["n"]}), {"n": "source.n", **label}),
        Step("total", _piece("total", lambda i: {"sum": i["a"] + i["b"]}), {"a": "double.v", "b": "triple.v", **label}),
    ], {"n": 1, "label": "p"})
"""


def expected_outputs(step: str, n: int, label: str) -> dict[str, Any]:
    """What step `step` of a run with params n and label returns (what PIPELINE_SOURCE computes)."""
    return {
        "source": {"n": n, "label": label},
        "double": {"v": 2 * n},
        "triple": {"v": 3 * n},
        "total": {"sum": 5 * n},
    }[step]


def pipeline_params(index: int) -> dict[str, Any]:
    return {"n": index + 1, "label": f"pipe{index}"}


CLIENT_SOURCE = """
import json
import os
import sys

import kinetic_tui as kinetic
import chaos_jobs

spec = json.loads(open(sys.argv[1]).read())
acks = open(spec["acks"], "a")


def ack(**event):
    acks.write(json.dumps(event) + "\\n")
    acks.flush()
    os.fsync(acks.fileno())


remote = kinetic.run(accelerator="cpu")(chaos_jobs.work)
for action in spec["actions"]:
    try:
        if action["op"] == "async":
            handles = []
            for tag, seconds, fail in action["jobs"]:
                handle = remote.run_async(tag, seconds, fail)
                ack(op="async", job=handle.job_id, tag=tag)
                handles.append(handle)
            for handle in handles if action["wait"] else ():
                try:
                    ack(op="value", job=handle.job_id, value=handle.result(timeout=120))
                except ValueError as exc:
                    ack(op="raised", job=handle.job_id, error=str(exc))
        elif action["op"] == "blocking":
            for tag, seconds, fail in action["jobs"]:
                try:
                    value = remote(tag, seconds, fail)
                except ValueError as exc:
                    ack(op="raised", tag=tag, error=str(exc))
                else:
                    ack(op="value", job=value["job"], value=value)
        elif action["op"] == "map":
            inputs = [{{"tag": tag, "seconds": seconds, "fail": fail}} for tag, seconds, fail in action["jobs"]]
            batch = remote.map(inputs, max_concurrent=action["max_concurrent"], retries=action["retries"])
            ack(op="map", group=batch.group_id, jobs=[h.job_id for h in batch.handles()])
            if action["wait"]:
                values = batch.results(return_exceptions=True, timeout=120)
                for handle, value in zip(batch.handles(), values):  # the latest attempts: after the retries
                    if isinstance(value, BaseException):
                        ack(op="raised", job=handle.job_id, error=repr(value))
                    else:
                        ack(op="value", job=handle.job_id, value=value)
    except Exception as exc:
        ack(op="error", action=action["op"], error=f"{{type(exc).__name__}}: {{exc}}")
acks.close()
"""


@dataclass(frozen=True)
class Project:
    root: Path
    markers: Path
    acks: Path
    specs: Path
    requests: Path  # the endpoints' request markers

    def client_command(self, spec_path: Path) -> list[str]:
        return [sys.executable, str(self.root / CLIENT_SCRIPT), str(spec_path)]


def make_project(base: Path, step_seconds: float) -> Project:
    """The user project, with its marker and ack directories beside it (outside the home)."""
    root, markers, acks, specs = base / "project", base / "markers", base / "acks", base / "specs"
    requests = base / "requests"
    for directory in (root, markers, acks, specs, requests):
        directory.mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "chaos-project"\nversion = "0.1"\n')
    (root / f"{JOBS_MODULE}.py").write_text(
        textwrap.dedent(JOBS_SOURCE.format(markers=str(markers), requests=str(requests), step_seconds=step_seconds))
        + PIPELINE_SOURCE
    )
    (root / CLIENT_SCRIPT).write_text(textwrap.dedent(CLIENT_SOURCE.format()))
    return Project(root, markers, acks, specs, requests)


@dataclass(frozen=True)
class Size:
    """How much work one run submits; the quick run and the soak differ only here."""

    async_clients: int
    async_jobs: int
    blocking_clients: int
    blocking_jobs: int
    map_clients: int
    map_inputs: int
    stagger: float  # seconds between client starts
    fault_every: float  # mean seconds between faults
    min_faults: int
    max_seconds: float  # the fault phase ends when the clients are done or after this long
    client_kills: int  # at most this many clients are SIGKILLed (the others are only stopped)
    settle_seconds: float  # how long the home may take to come to rest once the faults end
    min_jobs: int = 200  # the run must reach this many jobs (a killed client submits no more)
    training_epochs: int = 12
    study_trials: int = 3
    pipeline_runs: int = 6  # started one every pipeline_gap seconds while the clients run
    pipeline_gap: float = 2.5


QUICK = Size(
    6, 14, 4, 5, 4, 50, 0.5, fault_every=0.35, min_faults=30, max_seconds=30, client_kills=2, settle_seconds=30
)
SOAK = Size(
    30,
    25,
    10,
    10,
    40,
    110,
    1.0,
    fault_every=0.25,
    min_faults=500,
    max_seconds=1800,
    client_kills=8,
    settle_seconds=120,
    min_jobs=5000,
    pipeline_runs=60,
    pipeline_gap=10.0,
)


def _jobs(rng: random.Random, prefix: str, count: int, long_share: float) -> list[list[Any]]:
    """(tag, seconds, fail) per job: mostly short, some long enough to be caught running, 1 in 12 failing."""
    return [
        [
            f"{prefix}-{i}",
            round(rng.uniform(0.2, 0.8) if rng.random() < long_share else rng.uniform(0.005, 0.06), 3),
            rng.random() < 1 / 12,
        ]
        for i in range(count)
    ]


def client_specs(rng: random.Random, size: Size, project: Project) -> list[dict[str, Any]]:
    """One spec per client, shuffled: async clients (half wait for results, half leave at once), blocking
    clients, and map clients (lanes; retries=1; half wait, half leave so nobody drives their retries)."""
    specs: list[dict[str, Any]] = []
    for c in range(size.async_clients):
        jobs = _jobs(rng, f"a{c}", size.async_jobs, 0.25)
        specs.append({"name": f"async-{c}", "actions": [{"op": "async", "jobs": jobs, "wait": c % 2 == 0}]})
    for c in range(size.blocking_clients):
        jobs = _jobs(rng, f"b{c}", size.blocking_jobs, 0.2)
        specs.append({"name": f"blocking-{c}", "actions": [{"op": "blocking", "jobs": jobs}]})
    for c in range(size.map_clients):
        jobs = _jobs(rng, f"m{c}", size.map_inputs, 0.05)
        action = {"op": "map", "jobs": jobs, "max_concurrent": rng.choice([1, 2]), "retries": 1, "wait": c % 2 == 0}
        specs.append({"name": f"map-{c}", "actions": [action]})
    rng.shuffle(specs)
    for spec in specs:
        spec["acks"] = str(project.acks / f"{spec['name']}.jsonl")
        path = project.specs / f"{spec['name']}.json"
        path.write_text(json.dumps(spec))
        spec["path"] = str(path)
    return specs


def read_acks(project: Project) -> list[dict[str, Any]]:
    """Every acknowledged event of every client (a line cut short by a kill is not an acknowledgement)."""
    events = []
    for path in sorted(project.acks.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                events.append({**json.loads(line), "client": path.stem})
            except ValueError:
                continue
    return events


def read_markers(project: Project) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(project.markers.iterdir()) if path.suffix != ".tmp"]
