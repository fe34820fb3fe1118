"""A deterministic workspace for the console's snapshot tests: the same pixels on every run and machine.

Everything is made by really running work through the Console (finished jobs with real logs and a real
remote traceback, an interrupted-and-resumed training, a study, versions in every stage, an endpoint driven
by a load pattern, the canonical pipeline run three times); only what would differ between runs is pinned:

- job ids: `new_job_id` hands out `job-00000001`, `job-00000002`, ... while the workspace is built
  (patched where it is imported, since `batches` binds the name at import); `check_counted_ids` fails
  the build if any other id appears;
- no real supervisor runs while the workspace is built (`supervising` holds its lease): the builder does
  its duties itself, in this process, so every job is one it submitted, in its order;
- the console's clock (training and registry timestamps) stands still at FROZEN;
- job timestamps are written by the local backend with the real `time.time`, which it also uses for its
  launch window, so they are not patched while jobs run: once everything has settled, `pin_job_times`
  rewrites them through the store, one fixed slot per job in submission order (the least hacky path: the
  backend keeps real time for real processes, and the rows read as if each job had taken JOB_TOOK s);
- pipeline step durations and run times: a step's duration is its job's run time and a run records when
  it started and settled, so once the runs have settled `pin_step_durations` rewrites every step's
  duration to 0 and run n's times to a fixed slot of RUN_TOOK s, through the store;
- the runner's per-phase wall times in the job logs ("phase verify ok (0.00s)") read 0.00s on a fast machine
  and 0.01s on a loaded one: `pin_phase_timings` rewrites them to 0.00s once the jobs have ended;
- the workspace lives at one fixed path (ROOT), because the runner logs its work directory: the session
  fixture builds it there under a lock, so two test sessions on one machine take turns;
- the machine-sized `cpu` pool (one node per core) is replaced by a fixed 4-node one.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import json
import os
import re
import shutil
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console
from kinetic_tui.core.supervisor.lease import Lease, holder

ROOT = Path("/tmp/kinetic-tui-snapshots")  # fixed: it appears in the job logs the snapshots show
FROZEN = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: the console's clock while the workspace is built
VIEWED_AT = FROZEN + 3_600.0  # the app's clock in the snapshots: an hour later
JOB_SLOT = 60.0  # job n is created at FROZEN + n * JOB_SLOT, starts a second later, ends after `JOB_TOOK` s
JOB_TOOK = 7.0
RUN_TOOK = 12.0
PROJECT_MODULE = "snap_user"
USER_MODULE = '''
def score(rows):
    """Logs a few lines, then returns a summary."""
    total = 0
    for number, row in enumerate(rows, start=1):
        total += row
        print(f"scored batch {number}/{len(rows)}: running total {total}", flush=True)
    return {"batches": len(rows), "total": total}


def _parse(record):
    return float(record["amount"])


def score_corrupt(records):
    """Fails three frames down: the remote traceback the job screen shows."""
    print(f"scoring {len(records)} records", flush=True)
    return [_parse(record) / 100 for record in records]
'''
GROUP, ENDPOINT, PIPELINE = "fraud", "fraud-web", "canonical"
CANONICAL = "kinetic_tui.core.demo.canonical:canonical_pipeline"
LOAD_PATTERN = ((10, 1), (45, 3), (5, 4))  # (concurrency, ticks): scale out, hold, scale in
PHASE_TIMING = re.compile(r"\(\d+\.\d+s\)")


@contextmanager
def counted_job_ids() -> Iterator[list[str]]:
    """`job-00000001`, `job-00000002`, ... for every job submitted inside the block; yields the ids handed
    out so far (for `check_counted_ids`)."""
    counter, issued = itertools.count(1), []

    def next_id() -> str:
        issued.append(f"job-{next(counter):08x}")
        return issued[-1]

    with (
        mock.patch("kinetic_tui.core.submission.context.new_job_id", next_id),
        mock.patch("kinetic_tui.core.batches.new_job_id", next_id),
    ):
        yield issued


@contextmanager
def supervising(home: Path) -> Iterator[None]:
    """Hold the home's supervisor lease for the block: the builder does the supervisor's duties itself
    (`controllers_here`, `drive_here`), and a real supervisor, started by anyone (this process, or a
    router's keep-alive in its own process), would run work concurrently under uncounted ids. Starting
    one is a flock attempt on this lease, so while it is held none starts."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lease = Lease.acquire(home)
    if lease is None:
        raise RuntimeError(f"a supervisor holds {home}'s lease (pid {holder(home)}); stop it before building")
    try:
        yield
    finally:
        lease.release()


def check_counted_ids(console: Console, issued: list[str]) -> None:
    """Fail the build if a job got an id `counted_job_ids` did not hand out: its snapshots would differ."""
    ids = [row[0] for row in console.workspace.store.query("SELECT job_id FROM jobs ORDER BY seq")]
    stray = [job_id for job_id in ids if job_id not in set(issued)]
    if stray:
        raise RuntimeError(
            f"snapshot workspace: {len(stray)} job(s) outside the counted ids ({', '.join(stray)}); "
            "something submitted work the builder did not (a real supervisor?) or an id function is unpatched"
        )


def write_project(root: Path) -> Path:
    """The user project whose functions the snapshot jobs run (a fixed module name, no machine paths)."""
    project = root / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'snap-user'\n")
    (project / f"{PROJECT_MODULE}.py").write_text(USER_MODULE)
    return project


def pin_job_times(console: Console) -> None:
    """Give every job fixed timestamps in submission order (see the module docstring for why afterwards)."""
    store = console.workspace.store
    with store.transaction():
        seqs = [row[0] for row in store.query("SELECT seq FROM jobs ORDER BY seq")]
        for slot, seq in enumerate(seqs, start=1):
            created = FROZEN + slot * JOB_SLOT
            store.write(
                "UPDATE jobs SET created_at = ?, started_at = ?, finished_at = ? WHERE seq = ?",
                (created, created + 1, created + 1 + JOB_TOOK, seq),
            )
        store.write("UPDATE pools SET created_at = ?", (FROZEN,))


def pin_step_durations(console: Console) -> None:
    """Every pipeline step reads 0ms and run n took RUN_TOOK s from a fixed start: a step's duration is its
    job's run time, measured by the supervisor, and a run's times are the driver's clock."""
    store = console.workspace.store
    with store.transaction():
        for pipeline, number, record in store.query("SELECT pipeline, number, record FROM pipeline_runs"):
            run = json.loads(record)
            run["started_at"] = FROZEN + number * JOB_SLOT
            run["finished_at"] = run["started_at"] + RUN_TOOK
            for step in run.get("steps", {}).values():
                step["duration"] = 0.0
            store.write(
                "UPDATE pipeline_runs SET record = ? WHERE pipeline = ? AND number = ?",
                (json.dumps(run), pipeline, number),
            )


def pin_phase_timings(home: Path) -> None:
    """Every "(1.23s)" phase timing in the job logs becomes "(0.00s)" (see the module docstring)."""
    for log in sorted(home.glob("local/jobs/*/logs/*.log")):
        log.write_text(PHASE_TIMING.sub("(0.00s)", log.read_text()))


async def fill(console: Console) -> None:
    """The scenario; every step waits until its work has settled, so nothing changes afterwards."""
    await console.pools.remove("cpu")
    await console.pools.add("cpu", "cpu", 4)
    await console.pools.add("tpu-v5e", "v5litepod-2x2", 2)
    await console.pools.add("gpu-l4", "l4x1", 2, spot=True)
    await console.jobs.submit(f"{PROJECT_MODULE}:score", args=[[3, 5, 8]], name="scorer", wait=True)
    await console.jobs.submit(
        f"{PROJECT_MODULE}:score_corrupt", args=[[{"amount": 12.5}, {"amnt": 3.0}]], name="corrupt-batch", wait=True
    )
    await console.training.start("baseline", {"learning_rate": 0.2}, epochs=4, pool="tpu-v5e", wait=True)
    await console.training.start(
        "preemptible", {"learning_rate": 0.3}, epochs=4, pool="tpu-v5e", interrupt_before_epoch=3, wait=True
    )
    await console.training.resume("preemptible", wait=True)
    await console.training.tune("sweep", {"learning_rate": [0.1, 0.4]}, "grid", 2, pool="gpu-l4", wait=True)
    for source in ("baseline", "preemptible", "sweep.trial-1", "sweep.trial-2"):
        await console.registry.register_from_training(GROUP, source)
    for version, stage in ((1, "Staging"), (1, "Production"), (2, "Staging"), (2, "Production"), (3, "Staging")):
        await console.registry.promote(GROUP, version, stage)
    with controllers_here(console):
        await console.endpoints.create(
            ENDPOINT, GROUP, scale_out_cooldown=2, scale_in_cooldown=3, max_loaded_models=2, tick_seconds=0
        )
        for route in (f"{GROUP}:v1", f"{GROUP}:v2", f"{GROUP}:v3", GROUP):
            await console.endpoints.invoke(ENDPOINT, route, {"amount": 42.0})
    # Observed, not measured (a measured load differs every run), and with no controller ticking: how many
    # instances it would start between two observations depends on the machine's speed.
    for concurrency, ticks in LOAD_PATTERN:
        for _ in range(ticks):
            await console.endpoints.observe(ENDPOINT, concurrency)
    with controllers_here(console):
        await console.endpoints.stop(ENDPOINT)
    await console.pipelines.register(CANONICAL)
    await drive_here(console, console.pipelines.run(PIPELINE, wait=False))
    await drive_here(console, console.pipelines.rerun(PIPELINE, wait=False))
    await drive_here(console, console.pipelines.rerun(PIPELINE, {"raw_rows": 800, "threshold": 0.99}, wait=False))


@contextmanager
def controllers_here(console: Console) -> Iterator[None]:
    """Drive the endpoint controllers in this process (no supervisor runs while the workspace is built), so
    the endpoint's instance jobs get counted ids like every other job here."""
    import threading

    from kinetic_tui.core.paths import call_on_home
    from kinetic_tui.core.serving.controller import EndpointControllers
    from kinetic_tui.core.supervisor.duties import Supervised

    home = Supervised(console.workspace.home, console.workspace.backend, lambda: console.pipelines.backend)
    controllers, done = EndpointControllers(), threading.Event()

    def drive() -> None:
        while not done.wait(0.05):
            call_on_home(home.home, controllers.tick, home)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def pin_serving(console: Console) -> None:
    """The endpoint's port (picked free) becomes 8000 and every measured load time 0, through the store."""
    from kinetic_tui.core.store import serving_repo

    store = console.workspace.store
    for name in store.endpoints.names():
        found = serving_repo.endpoint(store, name)
        if found is not None:
            serving_repo.save_config(store, name, {**found[0], "port": 8000})
    with store.transaction():
        store.write(
            "UPDATE serving_events SET detail = json_set(detail, '$.seconds', 0.0), at = ? WHERE kind = 'load'",
            (FROZEN,),
        )


async def drive_here(console: Console, started: Any) -> None:
    """Drive a pipeline run in this process with the supervisor's own driver (none is started while the
    workspace is built), so its step jobs get counted ids like every other job here."""
    from kinetic_tui.core.pipelines.driver import RunDriver
    from kinetic_tui.core.store import pipeline_steps_repo

    run = await started
    store = console.workspace.store
    driver = RunDriver(store, console.pipelines.backend)
    while pipeline_steps_repo.header(store, run.pipeline, run.run)[0].value == "Running":
        console.workspace.run(driver.tick)
        await asyncio.sleep(0.02)


def build(root: Path) -> Path:
    """Build the workspace under `root` (KINETIC_HOME is `root/home`, the project `root/project`);
    returns the home. Leaves the process's environment, cwd and sys.path as it found them."""
    home, project = root / "home", write_project(root)
    saved_env, saved_cwd, saved_path = os.environ.get("KINETIC_HOME"), os.getcwd(), list(sys.path)
    try:
        os.chdir(project)
        sys.path.insert(0, str(project))
        with counted_job_ids() as issued, supervising(home):
            console = Console(home=home, clock=lambda: FROZEN, default_wait=True)
            try:
                asyncio.run(fill(console))
            finally:
                asyncio.run(console.aclose())
                launcher.shutdown_server()  # every job has ended; the fork server is not needed to view them
            check_counted_ids(console, issued)
        pin_job_times(console)
        pin_step_durations(console)
        pin_serving(console)
        pin_phase_timings(home)
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        sys.modules.pop(PROJECT_MODULE, None)
        if saved_env is None:
            os.environ.pop("KINETIC_HOME", None)
        else:
            os.environ["KINETIC_HOME"] = saved_env
    return home


@contextmanager
def locked_workspace(root: Path = ROOT) -> Iterator[Path]:
    """Build the workspace afresh at `root` and keep it, under an exclusive lock beside it, for the block;
    yields its KINETIC_HOME. Removed afterwards: the next session rebuilds it from scratch."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        shutil.rmtree(root, ignore_errors=True)
        try:
            yield build(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
