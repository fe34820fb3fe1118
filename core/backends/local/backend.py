"""The embedded local backend: pools of emulated nodes, a FIFO queue, real runner processes.

`LocalBackend` is the face the console, the CLI and job handles use; its parts live beside it: `pools`
(the default pool and matching a job to a pool), `claims` (the queue walk that claims nodes in one
transaction), `launching` (starting processes once a claim has committed), `settling` (judging and
recording outcomes), `lanes` (map inputs run in chunks by one process per node), `volumes`,
`log_readers` and `trash`. Processes are started after the claim commits; a job whose launcher died in
between is found by `reconcile`, which adopts what its spawner started or queues it again.

Map inputs (one-node, no volumes, local jobs bucket) run in lanes: the queue walk opens a lane for a batch
input at the head, which takes a chunk of its batch and holds one node until its process ends; such
inputs have no processes or files of their own, and are settled from their lane's progress.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from kinetic_tui.core import cleanup_later
from kinetic_tui.core.accelerators import format_accelerator
from kinetic_tui.core.backends.base import JobChanges, LogBatch
from kinetic_tui.core.backends.local import exit_watch, forkserver_client, lanes, launcher
from kinetic_tui.core.backends.local.claims import claim
from kinetic_tui.core.backends.local.job_rows import ChangesCursor, JobRow, Pool, SubmitError, job_dir_for
from kinetic_tui.core.backends.local.launching import adopt_launch, start_claimed
from kinetic_tui.core.backends.local.log_readers import LaneLogReader, LogReader
from kinetic_tui.core.backends.local.pools import checked_config, ensure_default_pool, list_pools, match_pool
from kinetic_tui.core.backends.local.settling import finish, outcome
from kinetic_tui.core.backends.local.trash import discard
from kinetic_tui.core.backends.local.volumes import check_volume_path
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import Storage
from kinetic_tui.core.store import Store, jobs_repo, pools_repo, volume_locks_repo
from kinetic_tui.core.supervisor import process as supervisor

__all__ = ["CANCEL_GRACE", "JobRow", "LocalBackend", "Pool", "SubmitError", "job_dir_for"]

CANCEL_GRACE = 5.0
WAIT_POLL_MAX = 0.05  # seconds: the longest pause of a client waiting on its job (and echoing its log)
LOG_CHUNK = 1 << 20  # bytes of a log per batch: a replayed million-line log is never one huge list


class LocalBackend:
    """Pools, queue and processes of one KINETIC_HOME, all state in its `Store`."""

    name = "local"

    def __init__(self, store: Store) -> None:
        self.store = store
        ensure_default_pool(store)

    # -- pools ---------------------------------------------------------------------------------------

    def pools(self) -> list[Pool]:
        return list_pools(self.store)

    def pool(self, name: str) -> Pool:
        for pool in self.pools():
            if pool.name == name:
                return pool
        raise NotFoundError(f"unknown pool {name!r}; pools: {', '.join(p.name for p in self.pools()) or 'none'}")

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> Pool:
        config = checked_config(name, accelerator, nodes, spot)
        with self.store.transaction() as conn:
            if pools_repo.exists(conn, name):
                raise ValidationError(f"pool {name!r} already exists; remove it first or pick another name")
            pools_repo.insert(
                conn, name, format_accelerator(config).removesuffix(":spot"), nodes, config.spot, time.time()
            )
        return self.pool(name)

    def remove_pool(self, name: str) -> Pool:
        pool = self.pool(name)
        with self.store.transaction() as conn:
            active = jobs_repo.active_in_pool(conn, name)
            if active:
                raise ValidationError(f"pool {name!r} has {active} pending or running jobs; cancel them first")
            pools_repo.delete(conn, name)
        return pool

    # -- submission ------------------------------------------------------------------------------------

    def place(self, accelerator: str, num_nodes: int, volumes: tuple[str, ...] = ()) -> str:
        """Choose the pool and check volume paths; raises before anything is created."""
        pool = match_pool(self.pools(), accelerator, num_nodes)
        held = volume_locks_repo.held_paths(self.store)
        for path in volumes:
            if path not in held:  # a path a job holds exists only for that job; this one queues behind it
                check_volume_path(path)
        return pool

    def submit(
        self, handle: dict[str, Any], runner_args: list[str], volumes: tuple[str, ...] = (), group_id: str | None = None
    ) -> JobRow:
        """Queue the job (PENDING) and start whatever the pool can run now."""
        job_id = handle["job_id"]
        job_dir = job_dir_for(job_id)
        job_dir.mkdir(parents=True, exist_ok=True)
        output_dir = Path(handle["output_dir"]) if handle.get("output_dir") else None
        launch = {
            "job_dir": str(job_dir),
            "runner_args": list(runner_args),
            "argv": [*runner_args, "--workdir", "."],
            "volumes": list(volumes),
            "output_dir": str(output_dir) if output_dir else None,
        }
        self._queue([(handle, launch)], group_id)
        return self.job(job_id)

    def forget_unqueued(self, job_ids: list[str], storage: Storage, prefixes: list[str]) -> None:
        """Undo the files of a submission that failed before its rows committed (the store was locked, the
        disk full): it was never acknowledged, so no job directory or bucket object without a row stays
        behind. Rows that did commit keep their files, whatever failed after; an undo that fails leaves the
        files for `doctor` to report."""
        with contextlib.suppress(KineticError, OSError):
            if any(jobs_repo.get(self.store, job_id) is not None for job_id in job_ids):
                return
            for prefix in prefixes:
                storage.delete_prefix(prefix)
            for job_id in job_ids:
                discard(job_dir_for(job_id))

    def submit_lane_inputs(self, inputs: list[tuple[dict[str, Any], dict[str, Any]]], group_id: str) -> None:
        """Queue a map's inputs for lanes: (handle, lane_input) each, one transaction, no per-job files."""
        jobs_root = str(job_dir_for(""))  # joined by hand: one Path per input was a tenth of a map's submit
        self._queue(
            [
                (
                    handle,
                    {
                        "job_dir": os.path.join(jobs_root, handle["job_id"]),
                        "lane_input": lane_input,
                        "output_dir": handle["output_dir"],
                        "volumes": [],
                    },
                )
                for handle, lane_input in inputs
            ],
            group_id,
        )

    def _queue(self, jobs: list[tuple[dict[str, Any], dict[str, Any]]], group_id: str | None) -> None:
        """Insert the jobs PENDING and start whatever their pools can run now. The rows and the claims of
        what starts commit together: a map's rows are written once, not inserted and then updated by a
        second transaction that puts them in lanes."""
        with self.store.transaction() as conn:
            jobs_repo.insert_pending(conn, jobs, group_id)
            claims = [claim(self.store, pool) for pool in dict.fromkeys(handle["pool"] for handle, _ in jobs)]
        for claimed, assigned in claims:
            start_claimed(self.store, claimed, assigned)
        ids = [handle["job_id"] for handle, _ in jobs]
        if self._any_queued(ids):
            self.reconcile()  # jobs that ended while nobody looked may still hold the nodes; settling starts us
            if self._any_queued(ids):
                supervisor.ensure_running()

    def scheduling_due(self) -> bool:
        """Whether work waits for a scheduler: a queued job, or a lane whose process has ended (its node to
        free, what it did not reach to requeue), as a cheap look tells (`lanes.has_stopped`)."""
        return jobs_repo.any_queued(self.store) or any(lane.has_stopped() for lane in lanes.active(self.store))

    def _any_queued(self, job_ids: list[str]) -> bool:
        last = job_ids[-1]  # FIFO: if the last one started (or a lane took it), all did: lanes claim in order
        return jobs_repo.is_queued(self.store, last)

    # -- queries -------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRow:
        values = jobs_repo.get(self.store, job_id)
        if values is None:
            raise NotFoundError(self.unknown_job_message(job_id))
        return JobRow.from_values(values)

    def refresh(self, job_id: str) -> JobRow:
        """The job's row after settling it if its processes are done, or starting it if it now fits."""
        row = self.job(job_id)
        if row.status is JobStatus.RUNNING or row.lane is not None:
            self.reconcile(job_id)
        elif row.status is JobStatus.PENDING:
            self.schedule(row.pool)
        else:
            return row
        return self.job(job_id)

    def finished_among(self, job_ids: list[str]) -> dict[str, JobRow | None]:
        """Which of `job_ids` finished, after one settling pass over every running job and lane and one read
        of the rows asked for: their rows, None for ids the store has no row for, active ones absent."""
        self.reconcile()
        known, finished = jobs_repo.finished_among(self.store, job_ids)
        found: dict[str, JobRow | None] = {job_id: None for job_id in job_ids if job_id not in known}
        found.update((row.job_id, row) for row in map(JobRow.from_values, finished))
        return found

    def unknown_job_message(self, job_id: str) -> str:
        ids = jobs_repo.recent_ids(self.store)
        near = difflib.get_close_matches(job_id, ids, n=5, cutoff=0.5) or ids[:5]
        return f"unknown job {job_id!r}; " + (f"nearby ids: {', '.join(near)}" if near else "no jobs yet")

    def jobs(
        self,
        status: JobStatus | None = None,
        group_id: str | None = None,
        limit: int | None = None,
        outside_lanes: bool = False,
    ) -> list[JobRow]:
        """Newest first; finished jobs included (the store keeps history); `outside_lanes` leaves out the
        inputs lanes hold."""
        rows = jobs_repo.newest_first(
            self.store, None if status is None else status.value, group_id, limit, outside_lanes
        )
        return [JobRow.from_values(values) for values in rows]

    def job_changes(self, cursor: object = None) -> JobChanges:
        """Every job on the first look and after a prune; later, only the jobs submitted since, the active
        ones and the ones that were active last time (to see how they ended): a settled job never changes."""
        prunes = jobs_repo.prunes(self.store)
        if isinstance(cursor, ChangesCursor) and cursor.prunes == prunes:
            found = jobs_repo.changed_since(self.store, cursor.seq, list(cursor.active))
            rows, complete, seq = [JobRow.from_values(values) for values in found], False, cursor.seq
        else:
            rows, complete, seq = self.jobs(), True, 0
        seq = max([seq, *(row.seq for row in rows)])
        return JobChanges(
            rows, complete, ChangesCursor(prunes, seq, tuple(r.job_id for r in rows if not r.status.finished))
        )

    # -- scheduling ----------------------------------------------------------------------------------

    def schedule(self, pool_name: str | None = None) -> list[str]:
        """Start the queue heads that fit, per pool, in submission order; return the job ids started (for
        a lane, the ids of its inputs)."""
        claimed, assigned = claim(self.store, pool_name)
        start_claimed(self.store, claimed, assigned)
        return [row.job_id for row in claimed] + [job_id for a in assigned for job_id, _ in a.inputs]

    # -- settling ------------------------------------------------------------------------------------

    def reconcile(self, job_id: str | None = None, start: bool = True) -> list[str]:
        """Settle RUNNING jobs whose processes are done (or gone) and apply their lanes' progress; then, with
        `start`, start what fits (`down` settles without starting what it is about to cancel). Returns
        settled ids."""
        if job_id:
            row = self.job(job_id)
            rows = [] if row.in_lane else [row]
            lane = lanes.get(self.store, row.lane) if row.lane else None
            open_lanes = [lane] if lane else []
        else:
            rows = self.jobs(status=JobStatus.RUNNING, outside_lanes=True)
            open_lanes = lanes.active(self.store)
        settled, pools = [], set()
        for row in rows:
            if row.status is not JobStatus.RUNNING:
                continue
            if row.hosts is not None and all(host.never_ran(row.job_dir) for host in row.hosts):
                jobs_repo.forget_hosts(self.store, row.job_id)  # adopted before they said so: judge the launch
                row = replace(row, hosts=None)
            if row.hosts is None:
                adopted, freed = adopt_launch(self.store, row)
                if freed:
                    pools.add(row.pool)
                if adopted is None:
                    continue
                row = adopted
            result = outcome(row)
            if result is not None and finish(self.store, row.job_id, *result):
                settled.append(row.job_id)
                pools.add(row.pool)
        settled += self.observe_lanes(open_lanes, pools)
        if not start:
            return settled
        for pool in pools:
            self.schedule(pool)
        if job_id is None and not pools:
            self.schedule()
        return settled

    def observe_lanes(
        self, open_lanes: list[lanes.Lane], pools: set[str | None] | None = None, patient: bool = True
    ) -> list[str]:
        """Apply the lanes' progress (see `lanes.observe` for `patient`); a closed lane frees its node, so
        its pool goes into `pools` (or, without `pools`, is scheduled at once)."""
        settled, freed = [], set()
        for lane in open_lanes:
            done, closed = lanes.observe(self.store, lane, patient)
            settled += done
            if closed:
                discard(lane.dir / "work")
                freed.add(lane.pool)
        if pools is None:
            for pool in freed:
                self.schedule(pool)
        else:
            pools.update(freed)
        return settled

    def cancel(self, job_id: str, grace: float = CANCEL_GRACE, start: bool = True) -> JobRow:
        """PENDING: cancelled at once. RUNNING: SIGTERM, then SIGKILL after `grace`, then CANCELLED. Then, with
        `start`, start the queued jobs that now fit (`down`, cancelling the whole queue, starts none)."""
        row = self.job(job_id)
        if row.status.finished:
            return row
        if row.lane is not None:
            return self._cancel_in_lane(row, grace, start)
        jobs_repo.request_cancel(self.store, job_id, time.time())
        row = self.job(job_id)
        if row.status is JobStatus.RUNNING:
            hosts = row.hosts if row.hosts is not None else self._stop_launch(row)
            if hosts:
                launcher.terminate(hosts, grace=grace)
            finish(self.store, job_id, JobStatus.CANCELLED, None, "cancelled")
        if start:  # a cancelled queue head may have been blocking the jobs behind it; a stopped job frees nodes
            self.schedule(row.pool)
        return self.job(job_id)

    def _stop_launch(self, row: JobRow) -> tuple[launcher.HostProcess, ...]:
        """The processes of a job being launched: none if its launch can still be given up, else those its
        spawner starts (waited for while the spawner runs; a stopped one is not waited on past the
        client's own patience)."""
        deadline = time.monotonic() + forkserver_client.START_TIMEOUT
        while not launcher.abandon(row.job_dir):
            state = launcher.launch_state(row.job_dir, row.nodes)
            if state.complete or state.failed is not None or time.monotonic() >= deadline:
                return tuple(state.started)
            time.sleep(0.01)
        return ()

    def _cancel_in_lane(self, row: JobRow, grace: float, start: bool) -> JobRow:
        """Mark it cancelled, ask its lane to skip it, then read the lane's progress: if the lane has
        already started it, stop the lane (its other inputs go back to the queue). The order matters: see
        the lane protocol in runner/remote_runner.py."""
        jobs_repo.request_cancel(self.store, row.job_id, time.time())
        lane = lanes.get(self.store, row.lane or "")
        if lane is not None and lane.ended_at is None:
            lanes.request_skip(lane, row.job_id)
            freed: set[str | None] | None = None if start else set()  # a set collects, None schedules
            self.observe_lanes([lane], freed)
            lane, current = lanes.get(self.store, lane.lane_id), self.job(row.job_id)
            if (
                lane
                and lane.hosts
                and lane.ended_at is None
                and current.log_start is not None
                and current.log_end is None
            ):
                launcher.terminate(lane.hosts, grace=grace)
                self.observe_lanes([lane], freed)
        if start:
            self.schedule(row.pool)
        return self.job(row.job_id)

    def wait(self, job_id: str, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> JobRow:
        """Block until the job settles; TimeoutError (the job keeps running) after `timeout` seconds.
        `on_poll` runs on every poll (the decorator echoes new log lines from there, in this thread)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, last_full = 0.0005, time.monotonic()
        while True:
            if on_poll is not None:
                on_poll()
            row = self.job(job_id)
            if row.status.finished:
                return row
            lane = lanes.get(self.store, row.lane) if row.lane else None
            if lane is not None and lane.ended_at is None and lane.has_news():
                self.observe_lanes([lane], patient=False)
                continue
            if (
                row.status is JobStatus.RUNNING
                and row.hosts is not None
                and all(launcher.exit_code(row.job_dir, h.host) is not None for h in row.hosts)
            ):
                self.reconcile(job_id)
                continue
            if time.monotonic() - last_full > 0.5:  # the slow path: liveness checks, queue heads
                last_full = time.monotonic()
                if row.status is JobStatus.RUNNING or row.lane is not None:
                    self.reconcile(job_id)
                else:
                    self.schedule(row.pool)
                    supervisor.ensure_running()  # still queued: whoever moves it must outlive this client
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {row.status.value} after {timeout} s; it keeps running")
            cleanup_later.run_pending()  # the previous call's, while this job runs on another core
            # with the job's spawn connection, the pause ends when the fork server reaps it: no need to look
            # sooner; without it, look again soon and then less often
            exit_watch.pause(row.job_dir, WAIT_POLL_MAX if exit_watch.watching(row.job_dir) else delay)
            delay = min(delay * 2, WAIT_POLL_MAX)

    # -- logs ------------------------------------------------------------------------------------------

    def log_paths(self, row: JobRow) -> list[Path]:
        return [launcher.log_path(row.job_dir, host) for host in range(row.nodes)]

    def read_logs(
        self,
        job_id: str,
        follow: bool = False,
        stop: threading.Event | None = None,
        keep: int | None = None,
        poll: float = 0.05,
    ) -> Iterator[list[str]]:
        """Batches of complete lines; with `follow`, keeps reading until the job settles (or `stop` is set)
        and the files end. Multi-host jobs prefix each line with its host. With `keep`, whenever more than
        `keep` lines wait unread the older ones are counted, not decoded (`LogBatch.skipped`): looked for
        first, and again only while reads stop at their limit, so a reader keeping up pays nothing for it."""
        reader = self.log_reader(job_id)
        lagging = True  # nothing read yet, or the last read stopped at its limit
        while True:
            skipped = reader.skip(keep) if keep and lagging else 0
            batch = reader.read_some(LOG_CHUNK)
            lagging = reader.behind
            if skipped:
                yield LogBatch(batch, skipped)
            elif batch:
                yield batch
            if reader.behind and not (stop is not None and stop.is_set()):
                continue  # the rest of what is written already, before waiting for more
            if not follow or (stop is not None and stop.is_set()):
                break
            if not batch:
                row = self.job(job_id)
                if row.status is JobStatus.RUNNING:
                    self.reconcile(job_id)
                elif row.status.finished:
                    break
                if stop is not None:
                    stop.wait(poll)
                else:
                    time.sleep(poll)
        rest = reader.read() + reader.rest()
        if rest:
            yield rest

    def cleanup(self, job_id: str, workload: bool = True) -> None:
        """Remove the job's working directories (logs and result stay; a lane removes its own); refused
        while the job runs even when `workload` is False, as the caller removes its inputs next."""
        row = self.job(job_id)
        row = row if row.status.finished else self.refresh(job_id)  # a settled row never changes
        if not row.status.finished:
            raise ValidationError(f"job {job_id} is {row.status.value}; cancel it or wait before cleanup")
        if workload and not row.in_lane:
            discard(row.job_dir / "work")

    def leftover(self, job_id: str, files: bool) -> str | None:
        """The job's own processes still alive, then (with `files`) its working directory; a map input's
        processes are its lane's, which go on with the lane's other inputs, so they are not counted."""
        row = self.job(job_id)
        alive = [host.pgid for host in row.hosts or () if host.is_alive()]
        if alive and not row.in_lane:
            return f"process group{'s' if len(alive) > 1 else ''} {', '.join(map(str, alive))}"
        work = row.job_dir / "work"
        if files and not row.in_lane and work.exists():
            return f"working directory {work}"
        return None

    def log_reader(self, job_id: str) -> LogReader:
        row = self.job(job_id)
        return LaneLogReader(self, job_id) if row.in_lane else LogReader(self.log_paths(row))

    def lane_result(self, row: JobRow, files: dict[str, bytes] | None = None) -> bytes | None:
        """A map input's result pickle, from its lane's results file (None if it has none). With `files`,
        each lane's file is read once and kept there, for callers that collect a whole batch."""
        if row.lane is None or row.result_at is None or row.result_size is None:
            return None
        if files is not None and row.lane in files:
            data = files[row.lane]
        else:
            lane = lanes.get(self.store, row.lane)
            if lane is None:
                return None
            if files is None:
                return lanes.read_result(lane.dir, row.result_at, row.result_size)
            data = files[row.lane] = lanes.read_results(lane.dir)
        return data[row.result_at : row.result_at + row.result_size]

    def group_statuses(self, group_id: str) -> dict[str, tuple[JobStatus, float | None]]:
        """job_id -> (status, finished_at) for a batch: what a waiting client polls, without decoding rows."""
        return {
            job_id: (JobStatus(status), finished)
            for job_id, status, finished in jobs_repo.group_statuses(self.store, group_id)
        }
