"""The chaos test: a mixed workload on the local backend under a seeded random fault injector.

Workload (workload.py): client processes submitting single `@run` jobs (detached with `run_async`, some
clients waiting for the results and some leaving at once; blocking calls), maps in lanes (`retries=1`,
some clients watching, some leaving), a training with checkpoints and a grid tuning study (both started
detached from the CLI, their step writing a marker per epoch), and pipeline runs started detached from the
CLI one after another, driven by the supervisor, every step a job. 1 job in 12 raises on purpose. Two
endpoints (endpoints.py; their controllers run in the supervisor) invoked over HTTP by threads of the test
all along: one with a fixed instance count, one that the autoscaler scales from the load.

Faults (injector.py): SIGKILL, or SIGSTOP for 0.2-1.5 s then SIGCONT, to every kind of process of the home
(processes.py): the fork server, the supervisor, lane runners, job runners (single jobs and training
attempts), clients, endpoint routers and instances. Ground truth: the marker files the job functions
write per execution attempt, and the ones the endpoints' predict writes per request it serves.

The expectation per fault kind:
- fork server, SIGKILL or SIGSTOP: the jobs it forked go on and end in the state their markers say (a job
  that returned is SUCCEEDED and its result readable); a job being forked at that instant may fail in
  phase `launch` without having run (a training attempt so failed leaves its training resumable); the next
  launch starts a new server.
- supervisor, SIGKILL or SIGSTOP: nothing is lost; the queue moves again once anything brings a supervisor
  back (a client, the CLI); no job stays PENDING; the study keeps submitting its trials. A job it (or a
  client) had claimed but not yet launched when killed goes back to the queue, or, if it ran, settles
  from its own result.
- job runner, SIGKILL: that job is FAILED (phase `lost`; a training attempt makes its training Stopped,
  and `resume` continues from the last checkpoint), unless it had already recorded its result, then it is
  SUCCEEDED. SIGSTOP: the job only takes longer and ends as its marker says.
- lane runner, SIGKILL: the input it was running is FAILED; inputs it had not reached go back to the
  queue and run once; if it had started none, its inputs fail without running. SIGSTOP: only slower.
- client, SIGKILL: what it was acknowledged (a handle, a batch) still runs to the end, exactly once; a
  killed map client's failed inputs are retried by the next watcher (here the reconcile step). SIGSTOP: the
  client resumes and gets its values.
- every training and every trial of the study completes, after `resume` where a fault stopped it.
- endpoint instance, SIGKILL: a request in flight on it is answered 503 `InstanceLost` at once (never
  hangs); the controller replaces it (the live instance count comes back to the autoscaler's). Router,
  SIGKILL: its requests fail to connect until the controller starts it again, on the same port. SIGSTOP of
  either: requests only take longer. After the run every endpoint stops, leaving no process behind.
- pipeline runs, whose driver is the supervisor (killed or stopped mid-run): every run ends Succeeded,
  or Failed only because a step's job was killed (its descendants NotRun); each step settled once: its
  function ran under one job id, at most once, and an Executed step's outputs are what its inputs give.
What must never happen, whatever the faults: a job whose marker says it returned recorded FAILED or lost;
an acknowledged job missing; a job left PENDING or RUNNING; a job id run twice, or an input run under two
ids that are not recorded attempts of it; a damaged store (`PRAGMA integrity_check`); `kinetic-tui doctor`
(once it exists) reporting a problem; a process of the home left running after `down`.

Defects this test found are recognised by their violations (`reconcile.KNOWN`, empty while none is open):
a run whose violations are all reported defects is an expected failure naming them; any other violation
fails the test.

The quick run is part of the suite; `KINETIC_SOAK=1 pytest -s tests/chaos -k soak` runs the soak (>= 5,000 jobs,
>= 500 faults; in one process, so `-s` shows its report as it goes).
`KINETIC_CHAOS_SEED=N` replays a seed (the seed drives the workload and every choice of the injector;
the timing of a loaded machine does not replay).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import endpoints, processes, reconcile, workload
from tests.chaos.injector import Injector
from tests.serving.served import Home

TRAINING, STUDY = "chaos-train", "chaos-study"


# read at import: the suite's home fixture clears every KINETIC_* variable before a test runs
SEED = os.environ.get("KINETIC_CHAOS_SEED")
SOAK = os.environ.get("KINETIC_SOAK") == "1"


def _seed() -> int:
    return int(SEED or random.SystemRandom().randrange(2**32))


def _start_training(project: workload.Project, size: workload.Size) -> None:
    """The training and the study, detached from the CLI (not fault targets: they return in ~0.5 s)."""
    assert reconcile.cli("pool", "add", "trainpool", "--accelerator", "l4", "--nodes", "3")[0] == 0
    train = ("train", TRAINING, "--epochs", str(size.training_epochs), "--checkpoint-every", "2")
    common = ("--pool", "trainpool", "--step", f"{workload.JOBS_MODULE}:step", "--detach")
    code, out = reconcile.cli(*train, *common, cwd=project.root)
    assert code == 0, out
    space = ",".join(str(0.1 * (i + 1)) for i in range(size.study_trials))
    tune = ("tune", STUDY, "--space", f"learning_rate={space}", "--strategy", "grid")
    code, out = reconcile.cli(*tune, "--max-trials", str(size.study_trials), *common, cwd=project.root)
    assert code == 0, out
    code, out = reconcile.cli("pipeline", "register", f"{workload.JOBS_MODULE}:chaos_pipeline", cwd=project.root)
    assert code == 0, out


def _start_pipeline_run(base: Path, project: workload.Project, index: int) -> subprocess.Popen[bytes]:
    """`pipeline run --detach` in its own process (returns at once; the supervisor drives the run)."""
    params = [
        part
        for key, value in workload.pipeline_params(index).items()
        for part in ("--param", f"{key}={json.dumps(value)}")
    ]
    command = [reconcile.CLI, "pipeline", "run", workload.PIPELINE, *params, "--detach"]
    with open(base / f"pipeline-{index}.out", "w") as out:
        return subprocess.Popen(command, cwd=project.root, stdout=out, stderr=subprocess.STDOUT)


class _Serving(threading.Thread):
    """The endpoints' start (endpoints.py), beside the training's: then their invokers, until stopped."""

    def __init__(self, home: Path, project: workload.Project, rng: random.Random) -> None:
        super().__init__(name="chaos-endpoints", daemon=True)
        self.home, self.project, self.rng = home, project, rng
        self.served: Home | None = None
        self.invokers: endpoints.Invokers | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.served = endpoints.start(self.home, self.project.root)
            self.invokers = endpoints.Invokers(self.served, self.rng)
            self.invokers.start()
        except BaseException as exc:  # raised by the test once the clients are started
            self.error = exc

    def finish(self) -> tuple[Home, list[dict[str, Any]]]:
        self.join(120)
        if self.error is not None or self.invokers is None or self.served is None:
            raise AssertionError(f"the endpoints did not start: {self.error!r}")
        self.invokers.stop()
        return self.served, self.invokers.answers


def _drive(
    base: Path, home: Path, project: workload.Project, size: workload.Size, rng: random.Random
) -> tuple[Injector, _Serving]:
    """Start the training, the study, the endpoints and the clients (staggered) under the injector; return
    once the clients are done and the faults cover every kind (or after `size.max_seconds`), with every
    pause ended and the endpoints' invokers stopped."""
    specs = workload.client_specs(rng, size, project)
    serving = _Serving(home, project, random.Random(rng.random()))
    clients: list[subprocess.Popen[bytes]] = []
    injector = Injector(
        home,
        random.Random(rng.random()),
        clients=lambda: [p.pid for p in clients if p.poll() is None],
        every=size.fault_every,
        client_kills=size.client_kills,
    )
    starters: list[subprocess.Popen[bytes]] = []
    serving.start()
    _start_training(project, size)
    injector.start()
    started = time.monotonic()  # the fault phase's clock: a slow start on a loaded machine takes none of it
    try:
        while time.monotonic() - started < size.max_seconds:
            if len(starters) < size.pipeline_runs and time.monotonic() >= started + len(starters) * size.pipeline_gap:
                starters.append(_start_pipeline_run(base, project, len(starters)))
            if specs and time.monotonic() >= started + len(clients) * size.stagger:
                spec = specs.pop()
                with open(base / f"{spec['name']}.err", "w") as err:
                    command = project.client_command(Path(spec["path"]))
                    clients.append(subprocess.Popen(command, cwd=project.root, stdout=subprocess.DEVNULL, stderr=err))
            done = not specs and all(p.poll() is not None for p in clients)
            done = done and len(starters) == size.pipeline_runs and not serving.is_alive()
            if done and len(injector.faults) >= size.min_faults and injector.kinds_hit() >= set(processes.KINDS):
                break
            time.sleep(0.05)
    finally:
        injector.stop()
        serving.join(120)
        if serving.invokers is not None:
            serving.invokers.stop()
        for starter in starters:
            starter.wait(timeout=60)
        # the faults are over: a client still here has settle_seconds to finish on its own, then it is cut
        # (its acknowledged jobs are checked all the same); a cut client is not a fault
        deadline = time.monotonic() + size.settle_seconds
        for proc in clients:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                injector.cut_clients += 1
    return injector, serving


def _at_rest_checks(home: Path, verdict: reconcile.Verdict) -> None:
    """The store, `doctor`, and `down` leaving no process of the home."""
    integrity = reconcile.integrity(home)
    if integrity != "ok":
        verdict.add("store", f"PRAGMA integrity_check: {integrity}")
    clean, doctor = reconcile.doctor()
    if not clean:
        verdict.add("doctor", doctor)
    code, out = reconcile.cli("down", "--yes", as_json=False)
    if code != 0:
        verdict.add("down", str(out))
    deadline = time.monotonic() + 10
    while processes.ours(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    if processes.ours(home):
        verdict.add("leftover", reconcile.leftovers(processes.ours(home)))


def run_chaos(base: Path, home: Path, size: workload.Size, seed: int) -> dict:
    print(f"\nchaos seed {seed} (KINETIC_CHAOS_SEED={seed} replays it)")
    rng = random.Random(seed)
    project = workload.make_project(base, step_seconds=0.15)
    started = time.monotonic()
    injector, serving = _drive(base, home, project, size, rng)
    served, answers = serving.finish()
    fault_seconds = time.monotonic() - started
    acks = workload.read_acks(project)
    groups = sorted({a["group"] for a in acks if a["op"] == "map"})
    world = reconcile.settle(home, project.root, groups, TRAINING, STUDY, size.settle_seconds, workload.PIPELINE)
    settle_seconds = time.monotonic() - started - fault_seconds
    verdict = reconcile.judge(world, workload.read_markers(project), acks, injector.faults)
    reconcile.check_results(world, acks, verdict)
    reconcile.check_training(world, TRAINING, STUDY, verdict)
    reconcile.check_pipelines(world, workload.read_markers(project), injector.faults, size.pipeline_runs, verdict)
    requests = endpoints.read_requests(project.requests)
    serving_figures = endpoints.check_requests(answers, requests, injector.faults, verdict.add)
    serving_figures |= endpoints.check_at_rest(served, injector.faults, size.settle_seconds, verdict.add)
    serving_seconds = time.monotonic() - started - fault_seconds - settle_seconds
    _at_rest_checks(home, verdict)
    errors = [a for a in acks if a["op"] == "error"]
    report = {
        "seed": seed,
        "jobs": len(world.jobs),
        "executions": verdict.executions,
        "recorded_retries": verdict.retries,
        "training_resumes": world.resumes,
        "pipeline_runs": {f"#{run['run']}": run["status"] for run in world.pipeline_runs},
        "faults": len(injector.faults),
        "clients_cut": injector.cut_clients,
        "faults_by_kind": dict(sorted(injector.by_kind().items())),
        "client_errors": [f"{a['client']}: {a['error']}" for a in errors],
        "endpoints": serving_figures,
        "lost": sum(cat == "lost" for cat, _ in verdict.violations),
        "duplicated": sum(cat == "duplicated" for cat, _ in verdict.violations),
        "violations": [f"[{cat}] {what}" for cat, what in verdict.violations],
        "fault_phase_s": round(fault_seconds, 1),
        "settle_s": round(settle_seconds, 1),
        "endpoints_at_rest_s": round(serving_seconds, 1),
        "total_s": round(time.monotonic() - started, 1),
        "notes": world.notes + injector.errors,
    }
    print(json.dumps(report, indent=1))
    unanswered = [a for a in answers if a.get("status") != 200]  # what the endpoints answered but a value
    (base / "report.json").write_text(
        json.dumps({**report, "faults_log": injector.faults, "endpoint_errors": unanswered}, indent=1)
    )
    assert not injector.errors, f"the injector failed: {injector.errors[:5]}"
    assert len(world.jobs) >= size.min_jobs, f"too few jobs ran: {len(world.jobs)}"
    assert len(injector.faults) >= size.min_faults, report
    assert injector.kinds_hit() == set(processes.KINDS), report
    known = verdict.known()
    if known:  # every violation is a reported defect: say which, and fail on anything else
        pytest.xfail("reported defects: " + "; ".join(f"{k.name}: {k.reason}" for k in known))
    assert not verdict.violations, "\n".join(report["violations"])
    return report


@pytest.fixture
def chaos_home(kinetic_home: Path) -> Iterator[Path]:
    """The test's home; whatever process of it a failing run leaves is resumed and killed afterwards."""
    yield kinetic_home
    for pid in processes.ours(kinetic_home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)


def test_chaos_quick(tmp_path: Path, chaos_home: Path) -> None:
    run_chaos(tmp_path, chaos_home, workload.QUICK, _seed())


@pytest.mark.skipif(not SOAK, reason="the soak runs by hand: KINETIC_SOAK=1")
def test_chaos_soak(tmp_path: Path, chaos_home: Path) -> None:
    run_chaos(tmp_path, chaos_home, workload.SOAK, _seed())
