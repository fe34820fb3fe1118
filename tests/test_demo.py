"""The `--demo` workspace: `fill` really runs the whole scenario through the Console, on a marked demo home only."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console, RemoteJobFailed
from kinetic_tui.core.demo import DemoProgress, demo_home, fill, workload
from kinetic_tui.core.demo.fill import (
    CHANGED_PARAMS,
    ENDPOINT,
    FAILING_JOB,
    GROUP,
    LONG_JOB,
    MARKER,
    MULTI_HOST_JOB,
    PIPELINE,
    PREEMPTIBLE,
    RESUMED,
    SHORT_JOBS,
    STUDY,
)
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import using_home
from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.core.supervisor.loop import LINGER_ENV

PACE = 0.05


@pytest.fixture
def demo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "demo"
    monkeypatch.setenv("KINETIC_DEMO_HOME", str(path))
    return path


# -- the whole scenario ---------------------------------------------------------------------------------


async def _check_pools_and_jobs(console: Console) -> None:
    pools = {pool.name: pool for pool in await console.pools.list()}
    assert "cpu" in pools and not pools["cpu"].emulated
    assert {"tpu-v5e", "gpu-l4", "tpu-v4-multi", "gpu-l4-spot"} <= set(pools)
    assert all(pools[name].emulated for name in ("tpu-v5e", "gpu-l4", "tpu-v4-multi", "gpu-l4-spot"))
    assert pools["gpu-l4-spot"].spot

    jobs = {job.name: job for job in await console.jobs.list()}
    for name, _ in SHORT_JOBS:
        assert jobs[name].status == "SUCCEEDED"
        lines = (await console.jobs.logs(jobs[name].job_id)).lines
        assert f"[{name}] step 8/8 loss=" in "\n".join(lines)
    assert jobs[SHORT_JOBS[1][0]].pool == "tpu-v5e" and jobs[SHORT_JOBS[2][0]].pool == "gpu-l4"

    multi = jobs[MULTI_HOST_JOB]
    assert (multi.status, multi.pool) == ("SUCCEEDED", "tpu-v4-multi")
    multi_log = "\n".join((await console.jobs.logs(multi.job_id)).lines)
    assert "host 0: partial sum 6" in multi_log and "host 1: partial sum 22" in multi_log

    failed = jobs[FAILING_JOB]
    assert (failed.status, failed.phase) == ("FAILED", "execute")
    with pytest.raises(RemoteJobFailed) as raised:
        await console.jobs.result(failed.job_id)
    assert raised.value.phase == "execute" and raised.value.error_type == "KeyError"
    assert "Traceback" in raised.value.traceback and "_parse_record" in raised.value.traceback

    long = jobs[LONG_JOB]
    assert (long.status, long.pool) == ("RUNNING", "gpu-l4-spot")
    newest = await console.jobs.list()
    assert newest[0].name == LONG_JOB  # what the jobs view selects first
    assert next(job for job in newest if job.status == "FAILED").name == FAILING_JOB  # the newest failure
    assert (await console.jobs.cancel(long.job_id)).status == "CANCELLED"


async def _check_training_and_registry(console: Console) -> None:
    trainings = {run.name: run for run in await console.training.list()}
    waiting = trainings.pop(PREEMPTIBLE)
    assert waiting.status == "Stopped" and waiting.checkpoint_epoch is not None  # left for the operator to resume
    assert all(run.status == "Completed" for run in trainings.values())
    resumed = trainings[RESUMED]
    assert resumed.interruptions == 1 and len(resumed.job_ids) == 2 and resumed.current_epoch == resumed.max_epochs

    study = await console.training.study(STUDY)
    assert study.status == "Completed" and len(study.trials) == 4 and study.best is not None
    best = next(trial for trial in study.trials if trial.trial_id == study.best)
    assert best.metric == min(trial.metric for trial in study.trials)

    group = await console.registry.models(GROUP)
    stages = {version.version: version.stage for version in group.versions}
    assert stages == {1: "Archived", 2: "Production", 3: "Staging", 4: "None"}
    assert group.production == 2
    assert group.versions[2].source == best.training
    assert ("Production", "Archived") in {(t.from_stage, t.to_stage) for t in group.history if t.version == 1}


async def _check_endpoint_and_pipeline(console: Console) -> None:
    endpoint = await console.endpoints.get(ENDPOINT)
    actions = [event.action for event in endpoint.history]
    assert {"scale_out", "hold", "scale_in"} <= set(actions)
    assert actions.index("scale_out") < actions.index("scale_in")
    assert max(event.instance_count for event in endpoint.history) > endpoint.min_instances  # measured load
    assert endpoint.instance_count == endpoint.min_instances  # the load fell back at the end
    assert endpoint.evict_events and len(endpoint.load_events) >= 3
    assert endpoint.hits > 0

    runs = [await console.pipelines.get_run(PIPELINE, number) for number in (1, 2, 3)]
    fresh, cached, changed = runs
    assert all(run.status == "Succeeded" for run in runs)
    assert fresh.executed and {step.status for step in fresh.steps} <= {"Executed", "Skipped"}
    assert cached.executed == ()  # every step that ran in run 1 is Cached; the branch not taken stays Skipped
    assert [step.status for step in cached.steps] == [
        "Cached" if step.status == "Executed" else step.status for step in fresh.steps
    ]
    assert changed.params["raw_rows"] == CHANGED_PARAMS["raw_rows"]
    assert "preprocess" in changed.executed
    assert fresh.branch_taken["accuracy_gate"] and not changed.branch_taken["accuracy_gate"]
    changed_status = {step.name: step.status for step in changed.steps}
    assert (changed_status["register"], changed_status["notify"]) == ("Skipped", "Executed")
    # every executed step ran as its own job (what the pipelines view shows and opens); a cached one ran none
    for step in fresh.steps:
        if step.status == "Executed":
            assert step.job_id and (await console.jobs.get(step.job_id)).status == "SUCCEEDED"
    assert all(step.job_id is None for step in cached.steps)
    assert all(run.started_at is not None and run.finished_at is not None for run in runs)


def test_fill_runs_the_whole_scenario_through_the_console(demo_dir: Path, kinetic_home: Path) -> None:
    async def scenario() -> list[DemoProgress]:
        console = Console(home=demo_home(), default_wait=False)  # what `--demo` does: the UI detaches
        subscription = console.events.subscribe()
        seen: list[DemoProgress] = []
        await fill(console, seen.append, pace=PACE)
        published = []
        while subscription.pending():
            event = await subscription.__anext__()
            if isinstance(event, DemoProgress):
                published.append(event)
        assert published == seen
        try:
            await _check_pools_and_jobs(console)
            await _check_training_and_registry(console)
            await _check_endpoint_and_pipeline(console)
        finally:  # never leave the two-minute job behind, whatever failed, nor the demo home's fork server
            await console.endpoints.stop(ENDPOINT)
            for job in await console.jobs.list(status="RUNNING"):
                await console.jobs.cancel(job.job_id)
            with using_home(console.workspace.home):  # the demo home's server, not the test's home's
                launcher.shutdown_server()
        return seen

    seen = asyncio.run(scenario())
    total = len(seen)
    assert [event.step for event in seen] == list(range(1, total + 1))
    assert {event.total for event in seen} == {total}
    assert str(seen[4]) == f"demo: 5/{total} training interrupted and resumed"
    assert os.listdir(kinetic_home) == []  # the user's (here: the test's) KINETIC_HOME is never touched


# -- safety and failure ---------------------------------------------------------------------------------


def test_demo_home_starts_over_in_a_private_marked_directory(demo_dir: Path) -> None:
    first = demo_home()
    assert first == demo_dir.resolve() and (first / MARKER).is_file()
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    (first / "state.db").write_text("left over")
    assert demo_home(fresh=False) == first and (first / "state.db").exists()
    assert demo_home() == first and sorted(os.listdir(first)) == [MARKER]


def test_starting_over_stops_the_previous_demos_lingering_supervisor(
    demo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LINGER_ENV, "60")  # with nothing due it would serve the old files for a minute
    first = demo_home()
    assert supervisor.ensure_running(first)
    pid = supervisor.running(first)
    assert pid is not None
    assert demo_home() == first and sorted(os.listdir(first)) == [MARKER]
    assert supervisor.running(first) is None
    stat_file = Path(f"/proc/{pid}/stat")  # gone, or a zombie this test (its parent) has not reaped
    assert not stat_file.exists() or stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_demo_home_refuses_to_wipe_what_is_not_a_demo(
    demo_dir: Path, kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo_dir.mkdir()
    (demo_dir / "notes.txt").write_text("precious")
    with pytest.raises(ValidationError, match=r"not empty and not a demo workspace"):
        demo_home()
    assert (demo_dir / "notes.txt").read_text() == "precious"

    monkeypatch.setenv("KINETIC_DEMO_HOME", str(kinetic_home.parent))  # would contain the real home
    with pytest.raises(ValidationError, match=r"would hold the real workspace"):
        demo_home()
    assert kinetic_home.is_dir()


def test_fill_refuses_a_workspace_that_is_not_a_demo(kinetic_home: Path) -> None:
    async def scenario() -> None:
        console = Console()
        before = await console.pools.list()
        with pytest.raises(ValidationError, match=r"not a demo workspace"):
            await fill(console)
        assert await console.pools.list() == before

    asyncio.run(scenario())


def test_a_failing_step_is_announced_then_raised(demo_dir: Path) -> None:
    async def scenario() -> list[DemoProgress]:
        console = Console(home=demo_home())
        await console.pools.add("tpu-v5e", "v5litepod-2x2", 1)  # the name the scenario's first step needs
        seen: list[DemoProgress] = []
        with pytest.raises(ValidationError, match=r"already exists"):
            await fill(console, seen.append, pace=PACE)
        return seen

    (event,) = asyncio.run(scenario())
    assert event.step == 1 and event.label.startswith("failed at 'emulated accelerator pools added': pool 'tpu-v5e'")


# -- the workload functions, in-process -----------------------------------------------------------------


def test_workload_functions_log_fail_and_stop_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert workload.crunch("x", steps=3, delay=0) == workload.crunch("x", steps=3, delay=0)
    assert capsys.readouterr().out.count("[x] step 3/3 loss=") == 2
    with pytest.raises(ValueError, match="steps must be >= 1"):
        workload.crunch("x", steps=0)
    with pytest.raises(KeyError, match="amount"):
        workload.score_corrupt_batch(delay=0)
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    assert workload.all_reduce(values=2, delay=0) == {"host": 1, "partial_sum": 5}
    assert workload.stream_metrics(duration=0.03, interval=0.01) == 3

    doomed = tmp_path / "work"
    doomed.mkdir()
    monkeypatch.chdir(doomed)
    doomed.rmdir()  # what a new demo's wipe does to a running job's work directory
    assert workload.stream_metrics(duration=60, interval=0.01) == 0
    assert "stopping" in capsys.readouterr().out


def test_a_new_demo_stops_the_previous_demos_endpoints_before_it_wipes(demo_dir: Path) -> None:
    """Their routers and instances serve from the demo home: left running, they would outlive the files."""
    from tests.helpers import processes
    from tests.serving.served import Home, wait_for

    old = Home(demo_home(), demo_dir.parent)
    old.run("train base --epochs 1")
    old.run("register g --from-training base")
    old.run("promote g 1 Staging")
    old.run("promote g 1 Production")
    old.run("endpoint create e --model g --tick-seconds 0")
    try:
        wait_for(lambda: old.answering("e"), 60, "the previous demo's endpoint answering")
        routers = [pid for pid in processes.serving(old.home) if "router_process" in processes.describe(pid)]
        instances = [row[3] for row in old.instances("e")]
        assert len(routers) == 1 and len(instances) == 1
        demo_home()
        assert not set(routers + instances) & set(processes.serving(old.home))
    finally:
        processes.stop_infrastructure(old.home)
        processes.reap(old.home, 3.0)
