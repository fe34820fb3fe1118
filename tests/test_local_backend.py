"""The local backend with real job processes: pools, FIFO queue, placement, cancel,
jobs outliving their client, reconciliation, multi-host slices, volumes, concurrent schedulers, logs."""

from __future__ import annotations

import functools
import os
import signal
import time
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import backend as local_backend_module
from kinetic_tui.core.backends.local import launcher, launching
from kinetic_tui.core.backends.local.backend import LocalBackend, SubmitError
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, RemoteJobError
from kinetic_tui.core.store import jobs_repo
from kinetic_tui.core.store.db import StoreError
from kinetic_tui.core.supervisor import process as supervisor
from tests.lifecycle.backend_projects import (
    client_json,
    finish_client,
    jobs,
    reap_jobs,
    recorded_hosts,
    start_client,
    user_project,
    wait_for,
)

TIMEOUT = 30.0


def _overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals running at one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _pool_snapshot() -> list[tuple[str, str, int, bool]]:
    return [(p.name, p.accelerator, p.nodes, p.spot) for p in local_backend().pools()]


SUBMIT_AND_EXIT = """
    import json, time
    import kinetic_tui as kinetic
    from {package} import jobs
    handles = [kinetic.run()(getattr(jobs, name)).run_async(*args) for name, args in {calls!r}]
    print(json.dumps({{"ids": [h.job_id for h in handles], "exited_at": time.time()}}))
"""


def _submit_from_client(user_project: tuple[Path, str], calls: list[tuple[str, tuple]]) -> dict:
    project, package = user_project
    return client_json(project, SUBMIT_AND_EXIT.format(package=package, calls=calls))


def _resize_cpu_pool(nodes: int) -> None:
    backend = local_backend()
    backend.remove_pool("cpu")
    backend.add_pool("cpu", "cpu", nodes)


def _raw_status(job_id: str) -> JobStatus:
    """The recorded status, without reconciling (what a fresh process finds before it looks closer)."""
    return local_backend().job(job_id).status


# -- pools ---------------------------------------------------------------------------------------------


def test_fresh_home_has_a_cpu_pool_with_one_node_per_core():
    (pool,) = local_backend().pools()
    assert (pool.name, pool.accelerator, pool.nodes, pool.spot) == ("cpu", "cpu", os.cpu_count(), False)
    assert not pool.emulated and pool.in_use == pool.queued == 0


def test_pool_add_list_remove():
    backend = local_backend()
    added = backend.add_pool("tpus", "v5litepod-2x2", 1)
    assert (added.accelerator, added.nodes, added.emulated) == ("v5litepod-2x2", 1, True)
    assert [p.name for p in backend.pools()] == ["cpu", "tpus"]
    assert backend.add_pool("spots", "v5e-4", 2, spot=True).spot
    backend.remove_pool("tpus")
    assert [p.name for p in backend.pools()] == ["cpu", "spots"]


@pytest.mark.parametrize(
    ("name", "accelerator", "nodes", "message"),
    [
        ("bad name!", "cpu", 1, "pool name"),
        ("", "cpu", 1, "pool name"),
        ("ok", "cpu", 0, "--nodes"),
        ("ok", "cpu", -2, "--nodes"),
        ("ok", "cpu", True, "--nodes"),
        ("ok", "cpu", "2", "--nodes"),
        ("ok", "v99-2x2", 1, "v99"),
        ("ok", "v4-2x2x2", 1, "needs 2 nodes"),
        ("cpu", "cpu", 1, "already exists"),
    ],
)
def test_bad_pool_is_refused_and_nothing_changes(name, accelerator, nodes, message):
    before = _pool_snapshot()
    with pytest.raises(ValueError, match=message) as info:
        local_backend().add_pool(name, accelerator, nodes)
    assert "\n" not in str(info.value)
    assert _pool_snapshot() == before


def test_remove_unknown_pool_names_the_pools():
    with pytest.raises(NotFoundError, match="unknown pool 'nope'; pools: cpu"):
        local_backend().remove_pool("nope")


def test_remove_is_refused_while_the_pool_has_active_jobs(jobs, tmp_path):
    backend = local_backend()
    backend.add_pool("tpus", "v5litepod-2x2", 1)
    gated = kinetic.run(accelerator="v5litepod-2x2")(jobs.gated)
    release = tmp_path / "release"
    running, queued = gated.run_async(str(release)), gated.run_async(str(release))
    with pytest.raises(ValidationError, match="'tpus' has 2 pending or running jobs"):
        backend.remove_pool("tpus")
    assert "tpus" in [p.name for p in backend.pools()]
    release.write_text("")
    running.result(timeout=TIMEOUT)
    queued.result(timeout=TIMEOUT)
    backend.remove_pool("tpus")
    assert [p.name for p in backend.pools()] == ["cpu"]


# -- the queue -------------------------------------------------------------------------------------------


def test_one_node_pool_runs_jobs_one_after_another_in_submission_order(jobs, tmp_path):
    local_backend().add_pool("one", "v5litepod-2x2", 1)
    gated = kinetic.run(accelerator="v5litepod-2x2")(jobs.gated)
    release = str(tmp_path / "release")
    first, second, third = gated.run_async(release), gated.run_async(release), gated.run_async(release)
    assert [first.pool, second.pool, third.pool] == ["one"] * 3
    assert first.status() is JobStatus.RUNNING
    assert second.status() is third.status() is JobStatus.PENDING
    assert local_backend().pool("one").queued == 2
    Path(release).write_text("")
    a, b, c = (h.result(timeout=TIMEOUT) for h in (first, second, third))
    assert a["end"] <= b["start"] and b["end"] <= c["start"]


def _release_and_check_order(release: Path, first: JobHandle, head: JobHandle, behind: JobHandle) -> None:
    """Open the gate the three wait on; the head starts only after `first` ended, `behind` only after it."""
    release.write_text("")
    for handle in (first, head, behind):
        handle.result(timeout=TIMEOUT)
    backend = local_backend()
    assert backend.job(first.job_id).finished_at <= backend.job(head.job_id).started_at
    assert backend.job(head.job_id).started_at <= backend.job(behind.job_id).started_at


def test_a_head_job_that_cannot_start_blocks_the_jobs_behind_it_though_they_fit(jobs, tmp_path):
    """Strict FIFO per pool: the head (its batch at max_concurrent) holds back a job the free nodes could run."""
    local_backend().add_pool("slices", "v4-2x2x2", 4)  # room for two 2-host slices
    gated = kinetic.run(accelerator="v4-2x2x2")(jobs.gated)
    release = tmp_path / "release"
    first, head = gated.map([str(release)] * 2, max_concurrent=1).handles()
    behind = gated.run_async(str(release))
    assert first.status() is JobStatus.RUNNING
    assert head.status() is behind.status() is JobStatus.PENDING
    assert local_backend().pool("slices").in_use == 2
    _release_and_check_order(release, first, head, behind)


def test_a_job_that_ended_unobserved_frees_its_node_for_the_next_submission(user_project, jobs):
    backend = local_backend()
    _resize_cpu_pool(1)
    (ended,) = _submit_from_client(user_project, [("add", (1, 2))])["ids"]
    job_dir = backend.job(ended).job_dir
    wait_for(lambda: launcher.exit_code(job_dir, 0) is not None, TIMEOUT, "the first job to end")
    assert _raw_status(ended) is JobStatus.RUNNING  # nobody has looked yet
    nxt = kinetic.run()(jobs.add).run_async(3, 4)
    assert _raw_status(nxt.job_id) is JobStatus.RUNNING and _raw_status(ended) is JobStatus.SUCCEEDED
    assert nxt.result(timeout=TIMEOUT) == 7


def test_accelerator_no_pool_provides_fails_at_submit_naming_pools_and_the_fix(jobs, kinetic_home):
    with pytest.raises(SubmitError) as info:
        kinetic.run(accelerator="l4")(jobs.add).run_async(1, 2)
    message = str(info.value)
    assert "no pool provides l4x1" in message and "pools: cpu (cpu" in message
    assert "kinetic-tui pool add NAME --accelerator l4x1 --nodes 1" in message
    assert local_backend().jobs() == []
    assert not list((kinetic_home / "local").glob("buckets/*/job-*"))


@pytest.mark.parametrize("how", ["single", "map"])
def test_a_submission_whose_rows_never_committed_leaves_no_files(jobs, kinetic_home, monkeypatch, how):
    """The store locked past its timeout at the insert: the caller gets the error and nothing was
    acknowledged, so no job directory, handle or batch stays behind for `doctor` to find without a row."""

    def locked(*_args: object) -> None:
        if how == "map":  # the output directories made ahead (output_dirs.py) exist, so their removal is tested
            wait_for(lambda: len(list(local.glob("buckets/*/job-*/output"))) == 2, 10, "the directories made ahead")
        raise StoreError("state.db is locked by another process for more than 5s")

    local = kinetic_home / "local"
    remote = kinetic.run()(jobs.add)
    with monkeypatch.context() as patch, pytest.raises(StoreError, match="locked"):
        patch.setattr(jobs_repo, "insert_pending", locked)
        remote.run_async(1, 2) if how == "single" else kinetic.map(remote, [(1, 2), (3, 4)])
    assert local_backend().jobs() == []
    assert not [p for p in local.glob("buckets/*/*") if p.name != "_groups"] + list(local.glob("buckets/*/_groups/*"))
    assert not list(local.glob("jobs/job-*"))


def test_a_claimed_job_whose_start_raises_fails_with_the_error_and_the_others_still_start(jobs, monkeypatch):
    """Three jobs claimed in one walk, the second one's start raising a bug: it is FAILED (phase launch)
    with the error, and the first and third start and finish."""
    backend = local_backend()
    backend.add_pool("trio", "l4", 3)
    add = kinetic.run(accelerator="l4")(jobs.add)
    with monkeypatch.context() as patch:  # queue all three with nothing started, so one walk claims them
        patch.setattr(local_backend_module, "claim", lambda store, pool_name: ([], []))
        patch.setattr(supervisor, "ensure_running", lambda: None)
        first, broken, third = add.run_async(1, 2), add.run_async(3, 4), add.run_async(5, 6)
    real_launch = launching.launcher.launch

    def launch(job_dir: Path, *args: object, **kwargs: object) -> object:
        if job_dir.name == broken.job_id:
            raise RuntimeError("injected start failure")
        return real_launch(job_dir, *args, **kwargs)

    monkeypatch.setattr(launching.launcher, "launch", launch)
    assert sorted(backend.schedule("trio")) == sorted(h.job_id for h in (first, broken, third))
    row = backend.job(broken.job_id)
    assert (row.status, row.phase) == (JobStatus.FAILED, "launch")
    assert "RuntimeError: injected start failure" in row.detail
    assert first.result(timeout=TIMEOUT) == 3 and third.result(timeout=TIMEOUT) == 11


def test_emulated_accelerator_pool_runs_the_job_on_the_cpu(jobs):
    local_backend().add_pool("tpus", "v5litepod-2x2", 1)
    handle = kinetic.run(accelerator="v5litepod-2x2")(jobs.whoami).run_async()
    assert (handle.pool, handle.accelerator) == ("tpus", "v5litepod-2x2")
    assert handle.result(timeout=TIMEOUT)["worker"] == "0"
    assert handle.status() is JobStatus.SUCCEEDED


# -- cancel ----------------------------------------------------------------------------------------------


def _armed(marker: Path) -> int:
    return int(
        wait_for(
            lambda: (
                marker.with_name(marker.name + ".ready").exists()
                and marker.with_name(marker.name + ".ready").read_text()
            ),
            TIMEOUT,
            "the job to arm",
        )
    )


def test_cancel_running_job_sends_sigterm(jobs, tmp_path):
    marker = tmp_path / "term"
    handle = kinetic.run()(jobs.on_sigterm).run_async(30, str(marker), False)
    _armed(marker)
    assert handle.cancel() is JobStatus.CANCELLED
    assert marker.read_text() == "SIGTERM"
    job_dir = local_backend().job(handle.job_id).job_dir
    exit_code = wait_for(lambda: launcher.exit_code(job_dir, 0), TIMEOUT, "the exit file")
    assert exit_code != -signal.SIGKILL  # it ended on SIGTERM by itself, not by the kill that ends the grace
    assert handle.status() is JobStatus.CANCELLED
    with pytest.raises(RemoteJobError, match="cancelled"):
        handle.result(timeout=TIMEOUT)


def test_cancel_kills_a_job_ignoring_sigterm_after_the_grace_and_the_next_job_starts(jobs, tmp_path, monkeypatch):
    """`cancel` hands its grace to `terminate`, whose waiting out the grace before the SIGKILL is shown
    without a clock in tests/test_launcher.py; here the deaf job ends by that SIGKILL."""
    backend = local_backend()
    backend.add_pool("one", "v5litepod-2x2", 1)
    marker = tmp_path / "stubborn"
    stubborn = kinetic.run(accelerator="v5litepod-2x2")(jobs.on_sigterm).run_async(30, str(marker), True)
    nxt = kinetic.run(accelerator="v5litepod-2x2")(jobs.add).run_async(2, 3)
    _armed(marker)
    assert nxt.status() is JobStatus.PENDING
    graces: list[float] = []
    terminate = launcher.terminate

    def recorded(hosts, grace=5.0):
        graces.append(grace)
        terminate(hosts, grace=grace)

    monkeypatch.setattr(launcher, "terminate", recorded)
    row = backend.cancel(stubborn.job_id, grace=0.5)
    assert graces == [0.5]
    assert row.status is JobStatus.CANCELLED and not marker.exists()
    assert not any(h.is_alive() for h in row.hosts)
    assert wait_for(lambda: launcher.exit_code(row.job_dir, 0), TIMEOUT, "the exit file") == -signal.SIGKILL
    assert backend.job(nxt.job_id).status in (JobStatus.RUNNING, JobStatus.SUCCEEDED)  # started by cancel
    assert nxt.result(timeout=TIMEOUT) == 5


def test_a_settler_that_read_the_row_before_a_cancel_records_it_cancelled_not_failed(jobs, tmp_path):
    """The race seen in CI: the poll read the row, the cancel was requested and killed the processes, and
    the poll then judged the killed processes a failure before the cancel recorded its outcome."""
    from kinetic_tui.core.backends.local import settling

    backend = local_backend()
    marker = tmp_path / "term"
    handle = kinetic.run()(jobs.on_sigterm).run_async(30, str(marker), False)
    _armed(marker)
    stale = backend.job(handle.job_id)
    assert not stale.cancel_requested
    jobs_repo.request_cancel(backend.store, handle.job_id, time.time())
    launcher.terminate(stale.hosts, grace=5.0)
    assert settling.finish(backend.store, handle.job_id, JobStatus.FAILED, "lost", "host 0 exited with -15")
    row = backend.job(handle.job_id)
    assert (row.status, row.phase, row.detail) == (JobStatus.CANCELLED, None, "cancelled")


def test_cancel_pending_job_never_runs_it_and_the_queue_moves_on(jobs, tmp_path):
    local_backend().add_pool("one", "v5litepod-2x2", 1)
    hold = kinetic.run(accelerator="v5litepod-2x2")(jobs.hold)
    release = tmp_path / "release"
    first = kinetic.run(accelerator="v5litepod-2x2")(jobs.gated).run_async(str(release))
    doomed, last = hold.run_async(0.0), hold.run_async(0.0)
    assert doomed.cancel() is JobStatus.CANCELLED
    assert first.status() is JobStatus.RUNNING
    release.write_text("")
    assert last.result(timeout=TIMEOUT)["start"] >= first.result(timeout=TIMEOUT)["end"]
    row = local_backend().job(doomed.job_id)
    assert row.status is JobStatus.CANCELLED and row.hosts is None and row.started_at is None
    assert doomed.tail_lines() == []


# -- outliving the client, reconciliation --------------------------------------------------------------


def test_job_queued_by_a_client_that_exited_still_starts(user_project, tmp_path):
    backend = local_backend()
    _resize_cpu_pool(1)
    release = tmp_path / "release"
    first, queued = _submit_from_client(user_project, [("gated", (str(release),)), ("add", (4, 5))])["ids"]
    assert _raw_status(queued) is JobStatus.PENDING  # the client has gone with it still queued
    release.write_text("")
    job_dir = backend.job(queued).job_dir  # from here on this process only reads; it schedules nothing
    wait_for(lambda: launcher.exit_code(job_dir, 0) is not None, TIMEOUT, "the queued job to run")
    assert _raw_status(first) is JobStatus.SUCCEEDED  # settled by the supervisor, which then started the next
    assert local_backend().job(first).finished_at <= local_backend().job(queued).started_at
    assert kinetic.attach(queued).result(timeout=TIMEOUT) == 9


def test_job_outlives_the_client_that_submitted_it(user_project, tmp_path):
    release = tmp_path / "release"
    submitted = _submit_from_client(user_project, [("gated", (str(release),))])
    (job_id,) = submitted["ids"]
    release.write_text("")  # only now, after the client has gone, may the job end
    result = kinetic.attach(job_id).result(timeout=TIMEOUT)
    assert result["job"] == job_id
    assert result["end"] > submitted["exited_at"]  # it was still running after the client had gone


def test_new_process_reconciles_finished_jobs_from_their_result_files(user_project):
    ok, bad = _submit_from_client(user_project, [("hold", (0.2,)), ("boom", ("bad input 7",))])["ids"]
    for job_id in (ok, bad):
        job_dir = local_backend().job(job_id).job_dir
        wait_for(lambda job_dir=job_dir: launcher.exit_code(job_dir, 0) is not None, TIMEOUT, f"{job_id} to exit")
        assert _raw_status(job_id) is JobStatus.RUNNING  # nobody has looked since it ended
    project, _ = user_project
    seen = client_json(
        project,
        """
        import json
        import kinetic_tui as kinetic
        from kinetic_tui.core.backends.local.workspace import local_backend
        jobs = kinetic.list_jobs()
        rows = {h.job_id: local_backend().job(h.job_id) for h in jobs}
        print(json.dumps({i: [r.status, r.phase, r.detail] for i, r in rows.items()}))
    """,
    )
    assert seen[ok] == ["SUCCEEDED", None, None]
    assert seen[bad] == ["FAILED", "execute", "ValueError: bad input 7"]


def test_new_process_marks_a_vanished_job_lost(user_project):
    (job_id,) = _submit_from_client(user_project, [("hold", (30.0,))])["ids"]
    row = wait_for(lambda: local_backend().job(job_id).hosts and local_backend().job(job_id), TIMEOUT, "hosts")
    wait_for(lambda: "phase execute:" in launcher.log_path(row.job_dir, 0).read_text(), TIMEOUT, "execute")
    os.killpg(row.hosts[0].pgid, signal.SIGKILL)
    exit_file = launcher.exit_path(row.job_dir, 0)
    wait_for(exit_file.exists, TIMEOUT, "the reaper's exit file")
    exit_file.unlink()  # the reaper is lost: no exit status, no result
    project, _ = user_project
    seen = client_json(
        project,
        f"""
        import json
        import kinetic_tui as kinetic
        from kinetic_tui.core.backends.local.workspace import local_backend
        status = kinetic.attach({job_id!r}).status()
        row = local_backend().job({job_id!r})
        print(json.dumps([status, row.phase, row.detail]))
    """,
    )
    assert seen == ["FAILED", "lost", "host 0 vanished without an exit status or result"]
    with pytest.raises(RemoteJobError, match="FAILED in phase lost"):
        kinetic.attach(job_id).result(timeout=TIMEOUT)


# -- multi-host slices ---------------------------------------------------------------------------------


def test_two_node_slice_runs_one_process_per_host_and_returns_host_0(jobs):
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.fail_on_worker).run_async("none")
    assert handle.num_nodes == 2
    assert handle.result(timeout=TIMEOUT, cleanup=False)["worker"] == "0"
    lines = list(handle.log_lines())
    pids = {}
    for host in (0, 1):
        (line,) = [x for x in lines if x.startswith(f"[host {host}] worker {host} pid ")]
        pids[host] = line.rsplit(" ", 1)[1]
    assert pids[0] != pids[1]
    assert local_backend().pool("slice").in_use == 0


def test_a_blocking_call_on_a_slice_echoes_the_hosts_output_but_not_the_runners_progress(jobs, capsys, monkeypatch):
    monkeypatch.delenv("KINETIC_VERBOSE", raising=False)
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    assert kinetic.run(accelerator="v4-2x2x2")(jobs.fail_on_worker)("none")["worker"] == "0"
    echoed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("[host 1] worker 1 pid ") for line in echoed), echoed
    assert not [line for line in echoed if "[kinetic]" in line], echoed


def test_a_partials_job_is_named_for_the_function_it_wraps(jobs):
    handle = kinetic.run()(functools.partial(functools.partial(jobs.add, 1), 2)).run_async()
    assert handle.result(timeout=TIMEOUT) == 3
    assert (handle.func_name, handle.display_name) == ("add", "add")


def test_two_node_slice_fails_when_a_worker_fails(jobs):
    local_backend().add_pool("slice", "v4-2x2x2", 2)
    handle = kinetic.run(accelerator="v4-2x2x2")(jobs.fail_on_worker).run_async("1")
    with pytest.raises(RuntimeError, match="worker 1 broke") as info:
        handle.result(timeout=TIMEOUT)
    assert any("on host 1" in note for note in info.value.__notes__)
    row = local_backend().job(handle.job_id)
    assert (row.status, row.phase) == (JobStatus.FAILED, "execute")
    assert row.detail == "host 1: RuntimeError: worker 1 broke"


# -- volumes -------------------------------------------------------------------------------------------


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data = tmp_path / "dataset"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("alpha")
    (data / "sub" / "b.txt").write_text("beta")
    return data


def test_volume_appears_at_its_absolute_path_and_is_removed_after(jobs, dataset, tmp_path):
    root = tmp_path / "mnt"
    target = root / "deep" / "data"
    remote = kinetic.run(volumes={str(target): kinetic.Data(str(dataset))})(jobs.read_tree)
    result = remote.run_async(str(target)).result(timeout=TIMEOUT)
    assert result["files"] == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert not root.exists()  # the host is left as it was


def test_jobs_wanting_the_same_volume_path_run_one_after_the_other(jobs, dataset, tmp_path):
    target = tmp_path / "shared" / "data"
    remote = kinetic.run(volumes={str(target): kinetic.Data(str(dataset))})(jobs.read_tree)
    release = tmp_path / "release"
    first = remote.run_async(str(target), str(release))
    wait_for(lambda: first.status() is JobStatus.RUNNING, TIMEOUT, "the first job to run")
    second = remote.run_async(str(target))
    assert second.status() is JobStatus.PENDING  # the pool has room: the path lock holds it back
    release.write_text("")
    a, b = first.result(timeout=TIMEOUT), second.result(timeout=TIMEOUT)
    assert a["end"] <= b["start"]
    assert a["files"] == b["files"] == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert not target.parent.exists()


def test_a_head_job_waiting_for_a_volume_blocks_the_jobs_behind_it_though_they_fit(jobs, dataset, tmp_path):
    """Strict FIFO holds for a held volume too: the head waits for the path's lock, and the plain job behind
    it waits with it although the pool has a node for each."""
    _resize_cpu_pool(3)
    target = str(tmp_path / "shared" / "data")
    release = tmp_path / "release"
    on_volume = kinetic.run(volumes={target: kinetic.Data(str(dataset))})(jobs.gated)
    holder = on_volume.run_async(str(release))
    assert holder.status() is JobStatus.RUNNING
    head = on_volume.run_async(str(release))
    behind = kinetic.run()(jobs.gated).run_async(str(release))
    assert head.status() is behind.status() is JobStatus.PENDING
    assert local_backend().pool("cpu").in_use == 1
    _release_and_check_order(release, holder, head, behind)


def test_existing_volume_path_fails_at_submit(jobs, dataset, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    with pytest.raises(SubmitError, match="already exists.*pass the Data as a function argument"):
        kinetic.run(volumes={str(taken): kinetic.Data(str(dataset))})(jobs.read_tree).run_async(str(taken))
    assert (taken / "keep.txt").read_text() == "mine" and local_backend().jobs() == []


def test_uncreatable_volume_path_fails_at_submit(jobs, dataset, tmp_path):
    if os.geteuid() == 0:  # root may write anywhere a mode allows, so use a file system that refuses
        target = Path("/proc/kinetic-test/data")
    else:
        locked = tmp_path / "readonly"
        locked.mkdir()
        locked.chmod(0o555)
        target = locked / "data"
    with pytest.raises(SubmitError, match="cannot create volume path.*pass the Data as a function argument"):
        kinetic.run(volumes={str(target): kinetic.Data(str(dataset))})(jobs.read_tree).run_async(str(target))
    assert not target.exists() and local_backend().jobs() == []


# -- concurrent schedulers -----------------------------------------------------------------------------

CONCURRENT_CLIENT = """
    import json
    import kinetic_tui as kinetic
    from {package} import jobs
    paired = kinetic.run()(jobs.paired)
    handles = [paired.run_async({markers!r}) for _ in range(3)]
    print(json.dumps([h.result(timeout=60) for h in handles]))
"""


def test_concurrent_clients_never_overcommit_a_two_node_pool_nor_run_a_job_twice(user_project, tmp_path):
    backend = local_backend()
    _resize_cpu_pool(2)
    markers = tmp_path / "markers"
    markers.mkdir()
    project, package = user_project
    code = CONCURRENT_CLIENT.format(package=package, markers=str(markers))
    clients = [start_client(project, code) for _ in range(4)]
    results = [r for client in clients for r in finish_client(client, timeout=90)]
    ids = [r["job"] for r in results]
    assert len(ids) == len(set(ids)) == 12
    assert sorted(p.name for p in markers.iterdir()) == sorted(ids)  # each ran exactly once
    assert _overlap([(r["start"], r["end"]) for r in results]) == 2  # paired jobs overlap; a third never joins
    for job_id in ids:
        log = launcher.log_path(backend.job(job_id).job_dir, 0).read_text()
        assert log.count("runner start") == 1


# -- logs ----------------------------------------------------------------------------------------------


def test_runner_lines_and_function_prints_share_the_job_log(jobs):
    handle = kinetic.run()(jobs.two_lines).run_async("hello", "world", 0)
    assert handle.result(timeout=TIMEOUT) == "done"
    lines = list(handle.log_lines())
    assert lines[0].startswith("[kinetic] runner start: host 0")
    order = [lines.index(x) for x in ("[kinetic] phase execute: calling two_lines", "hello", "world")]
    assert order == sorted(order)
    assert any(x.startswith("[kinetic] phase execute ok") for x in lines[order[-1] :])
    assert lines[-1] == "[kinetic] job succeeded"
    assert not recorded_hosts()[0].is_alive()
