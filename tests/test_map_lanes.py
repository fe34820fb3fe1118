"""Map lanes (core/backends/local/lanes.py) with real runner processes: each input of a map stays its own durable
job (row, log range, output dir, result) while a few lane processes run them; cancelling, crashing,
tampering and a lane that cannot start each affect only what they should."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import ModuleType

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import lanes
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import RemoteJobError
from tests.lifecycle.backend_projects import wait_for
from tests.lifecycle.run_projects import (
    TASKS_PRELUDE,
    client_result,
    load_module,
    make_project,
    run_client,
    stop_jobs,
)

TIMEOUT = 60

TASKS = (
    TASKS_PRELUDE
    + """

@kinetic.run()
def shout(x):
    print(f"input says {x}")
    Path(os.environ["KINETIC_OUTPUT_DIR"], "out.txt").write_text(str(x))
    return os.environ["KINETIC_JOB_ID"]


@kinetic.run(accelerator="l4")
def whose(x):
    return os.getpid()


@kinetic.run(accelerator="l4")
def whose_too(x):
    return os.getpid()


@kinetic.run()
def hold(x, marker_dir):
    if x == "fail":
        raise RuntimeError("fails fast")
    if x == "hold":
        Path(marker_dir, "holding").write_text("")
        wait_for(Path(marker_dir) / "release")
    Path(marker_dir, f"ran-{x}").write_text("")
    return x


@kinetic.run(accelerator="l4")
def gpu_hold(marker_dir):
    wait_for(Path(marker_dir) / "release")


@kinetic.run(accelerator="l4")
def gpu_mark(x, marker_dir):
    Path(marker_dir, f"ran-{x}").write_text("")
    return x


@kinetic.run()
def read(path, scale):
    return float(Path(path).read_text()) * scale


@kinetic.run()
def chatty(name, marker_dir):
    print(f"{name} begins", flush=True)
    if name == "A":
        wait_for(Path(marker_dir) / "release")
    print(f"{name} ends", flush=True)
    return name


@kinetic.run(accelerator="l4")
def nap(x):
    time.sleep(0.1)
    return x


@kinetic.run()
def crash(x):
    if x == 1:
        os._exit(3)
    return x
"""
)


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "inproc", {"kt_lanes/__init__.py": "", "kt_lanes/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_lanes.tasks")


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    path = tmp_path / "markers"
    path.mkdir()
    return path


def all_lanes_closed() -> bool:
    """Close every lane whose process has ended; True once none is open."""
    backend = local_backend()
    backend.reconcile()
    return not lanes.active(backend.store)


# -- chunking (pure) -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waiting", "parallel", "free", "mean", "held", "expected"),
    [
        (500, 2, 2, None, 0, 125),  # guided: 1/(2P) of what waits
        (3, 2, 2, None, 0, 1),  # small batches keep every node busy
        (4, 6, 6, None, 0, 1),
        (500, 2, 2, 0.0002, 0, 250),  # timed trivial inputs: big lanes, but each free node still gets half
        (281, 2, 1, 0.0002, 0, 141),  # one node free, the other busy: ~0.1 s of work, but only a fair share
        (281, 1, 1, 0.0002, 0, 281),  # the batch may use one node: that ~0.1 s
        (140, 2, 1, 0.0002, 141, 140),  # the other lane still holds 141: the rest is this lane's fair share
        (281, 2, 1, 0.001, 10, 100),  # slower inputs: ~0.1 s of them, less than the fair share
        (100, 2, 1, 2.0, 0, 25),  # slow inputs: the guided size wins
        (5000, 1, 1, 0.00001, 0, lanes.MAX_CHUNK),
    ],
)
def test_chunk_size(waiting: int, parallel: int, free: int, mean: float | None, held: int, expected: int) -> None:
    assert lanes.chunk_size(waiting, parallel, free, mean, held) == expected


# -- each input is a job -------------------------------------------------------------------------------------


def test_every_input_keeps_its_own_id_log_output_dir_and_result(tasks: ModuleType) -> None:
    batch = tasks.shout.map([1, 2, 3])
    handles = batch.handles()
    assert batch.results(timeout=TIMEOUT) == [h.job_id for h in handles]  # KINETIC_JOB_ID per input
    for x, handle in enumerate(handles, start=1):
        said = [line for line in handle.log_lines() if line.startswith("input says")]
        assert said == [f"input says {x}"]  # its own range of the lane's log, nobody else's
        assert Path(handle.output_dir, "out.txt").read_text() == str(x)
        row = local_backend().job(handle.job_id)
        assert row.lane and row.status is JobStatus.SUCCEEDED and row.started_at <= row.finished_at
    assert {h.job_id for h in handles} <= {h.job_id for h in kinetic.list_jobs()}
    assert kinetic.attach(handles[1].job_id).result() == handles[1].job_id


def test_data_arguments_reach_each_input_and_shared_content_uploads_once(tasks: ModuleType, tmp_path: Path) -> None:
    files = []
    for name, value in (("a", "1.5"), ("b", "2.5"), ("c", "1.5")):  # c has a's name and content
        (tmp_path / name).mkdir()
        files.append(tmp_path / name / "value.txt")
        files[-1].write_text(value)
    batch = tasks.read.map([(kinetic.Data(str(f)), 2) for f in files])
    assert batch.results(timeout=TIMEOUT) == [3.0, 5.0, 3.0]
    cache = list(Path(os.environ["KINETIC_HOME"]).glob("local/buckets/*/data-cache/*/"))
    assert len(cache) == 2


def test_following_a_running_input_yields_its_lines_and_none_of_the_next_inputs(
    tasks: ModuleType, markers: Path
) -> None:
    batch = tasks.chatty.map([(name, str(markers)) for name in "ABC"], max_concurrent=1)  # lane 1: A, B
    first, second, _ = batch.handles()
    lines = first.log_lines(follow=True)
    seen = [next(line for line in lines if line == "A begins")]
    lane_log = Path(lanes.get(local_backend().store, local_backend().job(first.job_id).lane).dir, "logs", "host-0.log")
    (markers / "release").write_text("")
    wait_for(lambda: "B ends" in lane_log.read_text(), TIMEOUT, "the lane to move on before the follower reads again")
    seen += [line for line in lines if line.endswith(("begins", "ends"))]
    assert seen == ["A begins", "A ends"]
    assert [line for line in second.log_lines() if line.endswith(("begins", "ends"))] == ["B begins", "B ends"]


def test_attach_finds_a_lane_input_by_its_batch_handles_file_when_the_store_does_not(
    tasks: ModuleType, kinetic_home: Path
) -> None:
    batch = tasks.shout.map([7])
    (handle,) = batch.handles()
    batch.wait(timeout=TIMEOUT)
    local_backend().store.write("DELETE FROM jobs WHERE job_id = ?", (handle.job_id,))
    assert kinetic.attach(handle.job_id) == handle


def test_a_batch_runs_in_a_few_lanes_and_every_lane_closes(tasks: ModuleType) -> None:
    local_backend().add_pool("two", "l4", 2)
    pids = tasks.whose.map(range(60)).results(timeout=TIMEOUT)
    opened = local_backend().store.query("SELECT COUNT(*) FROM lanes")[0][0]
    assert len(set(pids)) == opened < 60  # one process per lane, many inputs per process
    wait_for(all_lanes_closed, TIMEOUT, "every lane to close")
    assert local_backend().pool("two").in_use == 0


def test_a_repeated_map_starts_from_its_function_s_measured_input_time(tasks: ModuleType) -> None:
    """Before a batch's own inputs are timed its lanes take guided chunks (a quarter, then less), so 60
    trivial inputs need more lanes than nodes; the function's next batch starts from the time its inputs
    took there, and each node's first lane takes a fair share. Another function starts guided again."""
    local_backend().add_pool("two", "l4", 2)

    def lanes_of(batch: kinetic.BatchHandle) -> int:
        batch.results(timeout=TIMEOUT)
        return local_backend().store.query("SELECT COUNT(*) FROM lanes WHERE group_id = ?", (batch.group_id,))[0][0]

    assert lanes_of(tasks.whose.map(range(60))) > 2
    wait_for(all_lanes_closed, TIMEOUT, "every lane to close")  # a closing lane records its function's time
    assert lanes_of(tasks.whose.map(range(60))) == 2
    assert lanes_of(tasks.whose_too.map(range(60))) > 2


def test_a_client_waiting_for_results_does_not_poll_at_every_input(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`results` needs only the end: it wakes when a lane ends and otherwise backs off (2, 4, 8 ... ms), so
    8 inputs of 0.1 s in one lane cost about ten polls, where waking at each input's progress costs at least
    one per input."""
    from kinetic_tui.core.backends.local.batch import LocalBatchDriver

    local_backend().add_pool("one", "l4", 1)
    polls = []
    states = LocalBatchDriver.states
    monkeypatch.setattr(LocalBatchDriver, "states", lambda self, *a: polls.append(1) or states(self, *a))
    assert tasks.nap.map(range(8)).results(timeout=TIMEOUT) == list(range(8))
    assert len(polls) <= 15


def test_a_client_waiting_for_results_checkpoints_the_store_while_the_lanes_run(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write-ahead log is copied while the client would only wait, not by the commit that settles the
    lanes' inputs (see `Database.checkpoint`)."""
    from kinetic_tui.core.store.db import Database

    local_backend().add_pool("one", "l4", 1)
    calls = []
    checkpoint = Database.checkpoint
    monkeypatch.setattr(Database, "checkpoint", lambda self: calls.append(1) or checkpoint(self))
    assert tasks.nap.map(range(4)).results(timeout=TIMEOUT) == list(range(4))
    assert calls


# -- cancelling ------------------------------------------------------------------------------------------


def test_cancelling_a_queued_input_makes_its_lane_skip_it(tasks: ModuleType, markers: Path) -> None:
    batch = tasks.hold.map([("hold", str(markers)), ("a", str(markers)), ("b", str(markers))], max_concurrent=1)
    held, queued, _ = batch.handles()
    wait_for(lambda: (markers / "holding").exists(), TIMEOUT, "the held input to start")
    backend = local_backend()
    assert backend.job(queued.job_id).lane == backend.job(held.job_id).lane  # one chunk: [hold, a]
    assert queued.cancel() is JobStatus.CANCELLED
    (markers / "release").write_text("")
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.SUCCEEDED, JobStatus.CANCELLED, JobStatus.SUCCEEDED]
    assert not (markers / "ran-a").exists()
    assert list(queued.log_lines()) == []  # skipped: an empty range of the lane's log
    with pytest.raises(RemoteJobError, match="was cancelled"):
        queued.result()


def test_cancelling_a_running_input_stops_its_lane_and_the_rest_run_in_another(
    tasks: ModuleType, markers: Path
) -> None:
    batch = tasks.hold.map([("hold", str(markers)), ("a", str(markers)), ("b", str(markers))], max_concurrent=1)
    held = batch.handles()[0]
    wait_for(lambda: (markers / "holding").exists(), TIMEOUT, "the held input to start")
    first_lane = local_backend().job(held.job_id).lane
    assert held.cancel() is JobStatus.CANCELLED
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.CANCELLED, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]
    assert not (markers / "ran-hold").exists()
    assert local_backend().job(batch.handles()[1].job_id).lane != first_lane


def test_fail_fast_on_a_big_batch_stops_its_lane_without_starting_another(tasks: ModuleType, markers: Path) -> None:
    names = ["fail", "hold", *(f"x{i}" for i in range(18))]
    batch = tasks.hold.map(
        [(name, str(markers)) for name in names], max_concurrent=1, fail_fast=True, cancel_running_on_fail=True
    )
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.FAILED] + [JobStatus.CANCELLED] * 19
    assert local_backend().store.query("SELECT COUNT(*) FROM lanes")[0][0] == 1
    assert not list(markers.glob("ran-*"))


# -- failures --------------------------------------------------------------------------------------------


def test_an_input_that_kills_its_lane_fails_alone(tasks: ModuleType) -> None:
    batch = tasks.crash.map([0, 1, 2, 3], max_concurrent=1)
    with pytest.raises(kinetic.BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert list(info.value.errors) == [1] and isinstance(info.value.errors[1], RemoteJobError)
    assert "phase lost" in str(info.value.errors[1]) and "exited with 3" in str(info.value.errors[1])
    assert info.value.results == [0, None, 2, 3]


def test_a_tampered_batch_artifact_is_refused_before_any_input_runs(tasks: ModuleType, markers: Path) -> None:
    local_backend().add_pool("solo", "l4", 1)
    blocker = tasks.gpu_hold.run_async(str(markers))
    batch = tasks.gpu_mark.map([(i, str(markers)) for i in range(3)])
    assert batch.status_list() == [JobStatus.PENDING] * 3  # queued behind the blocker: no lane yet
    artifact = next(Path(os.environ["KINETIC_HOME"]).glob(f"local/buckets/*/_groups/{batch.group_id}/batch.pkl"))
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0xFF
    artifact.write_bytes(bytes(data))
    (markers / "release").write_text("")
    blocker.result(timeout=TIMEOUT)
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.FAILED] * 3
    assert {local_backend().job(h.job_id).phase for h in batch.handles()} == {"verify"}
    assert not list(markers.glob("ran-*"))


def test_a_lane_that_dies_before_its_first_input_fails_its_inputs_instead_of_looping(
    tasks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken_runner.py"
    broken.write_text(
        "import sys\n\ndef main(argv=None):\n    return 3\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    )
    monkeypatch.setenv("KINETIC_RUNNER_FILE", str(broken))
    batch = tasks.shout.map([1, 2])
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.FAILED, JobStatus.FAILED]
    rows = [local_backend().job(h.job_id) for h in batch.handles()]
    assert all(row.phase == "lost" and "before starting any input" in (row.detail or "") for row in rows)
    assert local_backend().store.query("SELECT COUNT(*) FROM lanes")[0][0] == 2  # one try per chunk, no loop


# -- another process -------------------------------------------------------------------------------------

LANE_MAIN = """
import json, sys

import kinetic_tui as kinetic


@kinetic.run()
def twice(x):
    print(f"twice {x}")
    return 2 * x


if __name__ == "__main__":
    batch = twice.map(range(6))
    print("RESULT " + json.dumps([batch.group_id, [h.job_id for h in batch.handles()]]))
"""


def test_lanes_finish_after_the_submitting_client_exits(tmp_path: Path) -> None:
    project = make_project(tmp_path / "lanesproj", {"pkg/__init__.py": "", "pkg/main.py": LANE_MAIN})
    group_id, job_ids = client_result(run_client(project, "-m", "pkg.main"))
    assert kinetic.attach_batch(group_id).results(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10]
    assert "twice 4" in kinetic.attach(job_ids[4]).tail_lines(5)
    assert json.loads(json.dumps(kinetic.attach(job_ids[0]).to_record()))["group_id"] == group_id


def _identity(x: object) -> object:
    return x


def test_lanes_ship_the_package_root_their_contexts_name_not_the_function_s(kinetic_home: Path, tmp_path: Path) -> None:
    # a pipeline's fan-out runs `run_step` (ours) in lanes; its steps' code lives in the user's project
    from kinetic_tui.core.backends.local.submission import jobs_storage, stage_lanes
    from kinetic_tui.core.submission.context import JobContext

    root = tmp_path / "project"
    root.mkdir()
    ctx = JobContext.from_params(_identity, "cpu", package_root=root, package_imports=([str(root)], str(root)))
    with stage_lanes(local_backend(), [ctx], [((1,), {})], jobs_storage(ctx.bucket)) as staged:
        assert staged.packed.root == root
        assert (staged.packed.plan["sys_path_rel"], staged.packed.plan["client_cwd_rel"]) == (["."], ".")
