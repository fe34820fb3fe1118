"""After the faults: drive the home to rest through the public API, then compare what it says with the
ground truth the job functions wrote (see test_chaos.py for the expectation per fault kind).

Driving to rest is what a user would do: `kinetic-tui jobs list --json` (the CLI brings a missing
supervisor back), `attach_batch(...).wait()` for every acknowledged batch (a watcher drives its retries),
`resume` for a Stopped training or trial, until no job is PENDING or RUNNING and the training, the
study and every pipeline run are settled (the CLI brings back a supervisor to drive a Running run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kinetic_tui as kinetic
from kinetic_tui.core.console import Console
from tests.chaos.endpoints import serving_jobs

CLI = str(Path(sys.executable).with_name("kinetic-tui"))
UNSETTLED = ("PENDING", "RUNNING")
TRAINING_SETTLED = ("Completed", "Failed")


@dataclass(frozen=True)
class Known:
    """A product defect this test found and reported, recognised by its violations' category and text."""

    name: str
    reason: str
    categories: tuple[str, ...]
    text: str

    def matches(self, category: str, what: str) -> bool:
        return category in self.categories and self.text in what


# The reported defects that are still open, each with why its violation is still expected. Empty: every
# defect this test found is fixed (a returned job recorded FAILED phase `lost`, the last, by the lost-exit
# fix: tests/test_lost_exit.py), so any violation fails the run.
KNOWN: tuple[Known, ...] = ()


def cli(*args: str, cwd: Path | None = None, timeout: float = 60.0, as_json: bool = True) -> tuple[int, Any]:
    """Run `kinetic-tui ARGS --json`; (exit code, parsed `result` or the raw output)."""
    argv = [CLI, *args, "--json"] if as_json else [CLI, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    try:
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])["result"]
    except (ValueError, IndexError, KeyError):
        return proc.returncode, proc.stdout + proc.stderr


@dataclass
class World:
    """What the public API says once the home is at rest."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    trainings: dict[str, dict[str, Any]] = field(default_factory=dict)
    study: dict[str, Any] = field(default_factory=dict)
    attempts: dict[str, list[list[str]]] = field(default_factory=dict)  # group -> attempts per input
    resumes: int = 0
    unlaunched: set[str] = field(default_factory=set)  # RUNNING rows without recorded processes, at the end
    pipeline_runs: list[dict[str, Any]] = field(default_factory=list)  # every run of the pipeline, with steps
    serving_jobs: set[str] = field(default_factory=set)  # the model's training and the instances (endpoints.py)
    notes: list[str] = field(default_factory=list)


def settle(
    home: Path, project_root: Path, groups: list[str], training: str, study: str, timeout: float, pipeline: str
) -> World:
    world = World()
    deadline = time.monotonic() + timeout
    while True:
        for group in groups:
            with contextlib.suppress(TimeoutError):
                kinetic.attach_batch(group).wait(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
        code, rows = cli("jobs", "list")
        if code != 0 or not isinstance(rows, list):
            world.notes.append(f"jobs list failed ({code}): {rows}")
            rows = []
        world.jobs = {row["job_id"]: row for row in rows}
        world.serving_jobs = serving_jobs(world.jobs)
        _, snapshot = cli("show", "study", study)
        world.study = snapshot if isinstance(snapshot, dict) else {}
        names = [training] + [t["training"] for t in world.study.get("trials", [])]
        for name in names:
            _, snapshot = cli("show", "training", name)
            if isinstance(snapshot, dict):
                world.trainings[name] = snapshot
                if snapshot["status"] == "Stopped":
                    world.resumes += 1
                    cli("resume", name, "--detach", cwd=project_root)
        busy = [j for j, row in world.jobs.items() if row["status"] in UNSETTLED and j not in world.serving_jobs]
        moving = [n for n, t in world.trainings.items() if t["status"] not in TRAINING_SETTLED]
        trials = world.study.get("trials", [])
        if world.study.get("status") != "Completed" and (
            len(trials) < world.study.get("budget", 0)
            or any(world.trainings.get(t["training"], {}).get("status") not in TRAINING_SETTLED for t in trials)
        ):
            moving.append(study)
        _, snapshot = cli("show", "pipeline", pipeline, cwd=project_root)  # showing it imports its module
        runs = snapshot.get("runs", []) if isinstance(snapshot, dict) else []
        moving += [f"{pipeline}#{run['run']}" for run in runs if run["status"] == "Running"]
        if (not busy and not moving) or time.monotonic() >= deadline:
            break
        time.sleep(0.3)
    for group in groups:
        world.attempts[group] = kinetic.attach_batch(group).manifest["attempts"]
    world.unlaunched = unlaunched(home)
    world.pipeline_runs = asyncio.run(_pipeline_runs(pipeline, [run["run"] for run in runs]))
    return world


async def _pipeline_runs(pipeline: str, numbers: list[int]) -> list[dict[str, Any]]:
    """Each run with its steps, as the console gives it (the CLI's `pipeline resume` of a Failed run exits 1
    with the step's error only)."""
    console = Console()
    try:
        return [(await console.pipelines.get_run(pipeline, number)).to_dict() for number in numbers]
    finally:
        await console.aclose()


def unlaunched(home: Path) -> set[str]:
    """Jobs claimed (RUNNING) whose processes were never recorded: read from the store, for diagnosis."""
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT job_id FROM jobs WHERE status = 'RUNNING' AND hosts IS NULL AND lane IS NULL")
        return {job_id for (job_id,) in rows}
    finally:
        conn.close()


def integrity(home: Path) -> str:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return ",".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


def doctor() -> tuple[bool, str]:
    """(True, its output) when `kinetic-tui doctor` exists and reports clean (exit 0); (False, why) when
    it reports something; (True, "absent") before the command exists."""
    if subprocess.run([CLI, "doctor", "--help"], capture_output=True).returncode != 0:
        return True, "absent"
    proc = subprocess.run([CLI, "doctor"], capture_output=True, text=True, timeout=120)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


@dataclass
class Verdict:
    violations: list[tuple[str, str]] = field(default_factory=list)  # (category, what)
    executions: int = 0
    retries: int = 0

    def add(self, category: str, what: str) -> None:
        self.violations.append((category, what))

    def known(self, table: tuple[Known, ...] = KNOWN) -> list[Known] | None:
        """The reported defects of `table` behind the violations, or None when some violation is none of them."""
        found = []
        for category, what in self.violations:
            match = next((k for k in table if k.matches(category, what)), None)
            if match is None:
                return None
            found.append(match)
        return sorted(set(found), key=table.index)


def judge(
    world: World, markers: list[dict[str, Any]], acks: list[dict[str, Any]], faults: list[dict[str, Any]]
) -> Verdict:
    verdict = Verdict()
    killed_pids = {f["pid"]: f["t"] for f in faults if f["signal"] == "KILL"}
    killed_jobs = {j for f in faults if f["signal"] == "KILL" and f["kind"] in ("job", "lane") for j in f["jobs"]}
    forkserver_faults = [f["t"] for f in faults if f["kind"] == "forkserver"]
    training_jobs = {j for t in world.trainings.values() for j in t["job_ids"]}

    by_job: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for marker in markers:
        by_job[marker["job"]][marker["kind"]].append(marker)
    verdict.executions = sum(len(kinds["start"]) for kinds in by_job.values())

    for job_id, kinds in by_job.items():
        row = world.jobs.get(job_id)
        if row is None:
            verdict.add("lost", f"{job_id} ran (markers {sorted(kinds)}) but no job row lists it")
            continue
        if len(kinds["start"]) > 1:
            pids = [m["pid"] for m in kinds["start"]]
            verdict.add("duplicated", f"{job_id} executed {len(pids)} times (pids {pids}); a job id runs once")
        epochs = [m["epoch"] for m in kinds["epoch"]]
        if len(epochs) != len(set(epochs)):
            verdict.add("duplicated", f"training attempt {job_id} ran epochs {sorted(epochs)}")
        if job_id in training_jobs:
            continue
        status, detail = row["status"], f"{row['status']} phase={row['phase']} detail={row['detail']}"
        pid = kinds["start"][0]["pid"] if kinds["start"] else None
        was_killed = pid in killed_pids and killed_pids[pid] >= kinds["start"][0]["t"] if pid else False
        if kinds["end"] and status != "SUCCEEDED" and not was_killed:
            verdict.add("succeeded-recorded-failed", f"{job_id} returned its value (marker) but is {detail}")
        elif kinds["raised"] and status != "FAILED":
            verdict.add("wrong-state", f"{job_id} raised on purpose but is {detail}")
        elif kinds["start"] and not kinds["end"] and not kinds["raised"] and not was_killed:
            verdict.add(
                "unexplained",
                f"{job_id} started, never finished, was not killed by us, and is {detail}; log: {_tail(job_id)}",
            )
        elif status == "SUCCEEDED" and not kinds["end"]:
            verdict.add("wrong-state", f"{job_id} is SUCCEEDED but its function never returned")

    for job_id, row in world.jobs.items():
        if job_id in world.serving_jobs:
            continue
        if row["status"] in UNSETTLED:
            why = "claimed but its processes never started" if job_id in world.unlaunched else "no process"
            verdict.add(
                "stuck", f"{job_id} still {row['status']} after the faults ended and the home was driven ({why})"
            )
        elif job_id not in by_job and job_id not in training_jobs:
            explained = (
                row["status"] == "CANCELLED"
                or job_id in killed_jobs
                or (row["phase"] == "launch" and any(t <= (row["finished_at"] or 0) for t in forkserver_faults))
            )
            if row["status"] == "SUCCEEDED" or not explained:
                verdict.add("unexplained", f"{job_id} never ran its function but is {row['status']}: {row['detail']}")

    acked = {a["job"] for a in acks if a["op"] in ("async", "value") and a.get("job")}
    acked |= {j for a in acks if a["op"] == "map" for j in a["jobs"]}
    for job_id in sorted(acked - set(world.jobs)):
        verdict.add("lost", f"{job_id} was acknowledged to a client but no job row lists it")
    for ack in acks:
        if ack["op"] == "value" and ack["value"]["job"] != ack["job"]:
            verdict.add("wrong-value", f"{ack['client']} got {ack['value']} for {ack['job']}")

    # a tag executed under two job ids is a second execution, allowed only as a recorded retry of one input
    tags: dict[str, set[str]] = defaultdict(set)
    for marker in markers:
        if "tag" in marker and marker["kind"] == "start":
            tags[marker["tag"]].add(marker["job"])
    recorded = [set(attempts) for batch in world.attempts.values() for attempts in batch]
    verdict.retries = sum(len(attempts) - 1 for attempts in recorded)
    for tag, jobs in tags.items():
        if len(jobs) > 1 and not any(jobs <= attempts for attempts in recorded):
            verdict.add("duplicated", f"input {tag} ran as {sorted(jobs)}, which are not recorded attempts of it")
    return verdict


def _tail(job_id: str) -> list[str]:
    try:
        return kinetic.attach(job_id).tail(4)
    except Exception as exc:
        return [f"{type(exc).__name__}: {exc}"]


def check_results(world: World, acks: list[dict[str, Any]], verdict: Verdict) -> None:
    """Every SUCCEEDED acknowledged job gives back its value through a handle or its batch, from this process."""
    for group in world.attempts:
        batch = kinetic.attach_batch(group)
        values = batch.results(return_exceptions=True, timeout=10)
        for handle, value in zip(batch.handles(), values):
            if world.jobs.get(handle.job_id, {}).get("status") == "SUCCEEDED" and (
                not isinstance(value, dict) or value.get("job") != handle.job_id
            ):
                verdict.add("wrong-value", f"{handle.job_id} of {group} is SUCCEEDED but its batch gave {value!r}")
    singles = {a["job"] for a in acks if a["op"] == "async"}
    for job_id in sorted(singles):
        row = world.jobs.get(job_id)
        if row is None or row["status"] != "SUCCEEDED":
            continue
        handle = kinetic.attach(job_id)
        if handle.status().value != "SUCCEEDED":
            verdict.add("wrong-state", f"{job_id}: jobs list says SUCCEEDED, its handle {handle.status().value}")
            continue
        try:
            value = handle.result(timeout=10)
        except Exception as exc:
            verdict.add("wrong-value", f"{job_id} is SUCCEEDED but result() raised {type(exc).__name__}: {exc}")
            continue
        if not isinstance(value, dict) or value.get("job") != job_id:
            verdict.add("wrong-value", f"{job_id} result() gave {value!r}")


def check_training(world: World, training: str, study: str, verdict: Verdict) -> None:
    names = [training] + [t["training"] for t in world.study.get("trials", [])]
    failed = False
    for name in names:
        snapshot = world.trainings.get(name)
        if snapshot is None or snapshot["status"] != "Completed":
            what = snapshot and (snapshot["status"], snapshot["error"])
            verdict.add("training", f"training {name} did not complete: {what}")
            failed = True
    if failed:
        return  # the study cannot complete; the trials' own failures say why
    if world.study.get("status") != "Completed" or len(world.study.get("trials", [])) != world.study.get("budget"):
        verdict.add("training", f"study {study} did not complete its budget: {world.study}")


def leftovers(own: list[int]) -> str:
    """Each process: its pid, parent, state and command line (the home's path cut off)."""
    described = []
    for pid in own:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        described.append(f"pid {pid} ppid {ppid} state {state}: {cmdline[:100]}")
    return "; ".join(described)


def check_pipelines(
    world: World, markers: list[dict[str, Any]], faults: list[dict[str, Any]], started: int, verdict: Verdict
) -> None:
    """Every run settled, each step once (one job id, its function run at most once: `judge` flags a job id
    run twice and a tag run under two ids), Executed outputs as the params give, Failed only where a fault
    killed its job or its launch, NotRun only below a failure."""
    from tests.chaos.workload import PIPELINE_STEPS, expected_outputs

    killed = {j for f in faults if f["signal"] == "KILL" and f["kind"] == "job" for j in f["jobs"]}
    forkserver_faults = [f["t"] for f in faults if f["kind"] == "forkserver"]
    ran: dict[str, set[str]] = defaultdict(set)
    for marker in markers:
        if marker["kind"] == "start" and "tag" in marker:
            ran[marker["tag"]].add(marker["job"])
    if len(world.pipeline_runs) != started:
        verdict.add("pipeline", f"{started} pipeline runs were started, {len(world.pipeline_runs)} are recorded")
    for run in world.pipeline_runs:
        where = f"pipeline run #{run['run']} ({run['status']})"
        params = run["params"]
        steps = {step["name"]: step for step in run["steps"]}
        if run["status"] not in ("Succeeded", "Failed"):
            verdict.add("pipeline", f"{where} did not settle: {[(s['name'], s['status']) for s in run['steps']]}")
            continue
        for name in PIPELINE_STEPS:
            step = steps[name]
            tag, job_id, status = f"{params['label']}-{name}", step["job_id"], step["status"]
            row = world.jobs.get(job_id or "", {})
            if ran[tag] - {job_id}:
                verdict.add("pipeline", f"{where}: step {name} ran as {sorted(ran[tag])}, recorded as {job_id}")
            if status == "Executed":
                if step["outputs"] != expected_outputs(name, params["n"], params["label"]):
                    verdict.add("wrong-value", f"{where}: step {name} gave {step['outputs']}")
                if row.get("status") != "SUCCEEDED":
                    verdict.add("pipeline", f"{where}: step {name} Executed but its job {job_id} is {row}")
            elif status == "Failed":
                launch = row.get("phase") == "launch" and any(
                    t <= (row.get("finished_at") or 0) for t in forkserver_faults
                )
                if job_id not in killed and not launch:
                    verdict.add("pipeline", f"{where}: step {name} Failed unexplained: {step['error']} (job {row})")
            elif status == "NotRun":
                if not any(s["status"] in ("Failed", "NotRun") for s in run["steps"] if s["name"] != name):
                    verdict.add("pipeline", f"{where}: step {name} NotRun though nothing failed")
            else:
                verdict.add("pipeline", f"{where}: step {name} ended {status}")
        executed = all(steps[name]["status"] == "Executed" for name in PIPELINE_STEPS)
        if executed != (run["status"] == "Succeeded"):
            verdict.add("pipeline", f"{where} with steps {[(s['name'], s['status']) for s in run['steps']]}")
