"""The embedded local backend (SPEC 2.5): pools of emulated nodes, a FIFO queue, real runner processes.

Scheduling is shared by every process that touches the workspace (the console, the CLI, a client waiting
on a handle, the reaper of a finished job): whoever looks first does the work. Claiming nodes is one
`BEGIN IMMEDIATE` transaction that re-reads the pool's usage, so no job starts twice and no pool is ever
over-committed, however many processes schedule at once. Processes are started after the claim commits
(a fork server start may take a while and must not hold the write lock); a job claimed but never
launched (its scheduler died in between) is found by `reconcile` and failed with phase `lost`.

Matching: a job runs on a pool whose accelerator shape equals the job's (`v5litepod-2x4` on a
`v5litepod-2x4` pool), and a spot job only on a spot pool, an on-demand job only on an on-demand pool,
as GKE node selectors would place them. Queue order is strict FIFO per pool: a head job that does not
fit blocks the jobs behind it, so a big slice is never starved by small ones.

Map inputs (one-node, no volumes, local jobs bucket) run in lanes (lanes.py): the queue walk opens a lane
for a batch input at the head, which takes a chunk of its batch and holds one node until its process
ends; such inputs have no processes or files of their own, and are settled from their lane's progress.

Volumes: the data appears at the absolute path for the job's lifetime. This backend does not use mount
namespaces; it creates the path for the job (refusing a path that already exists on the host), locks it
in the store against concurrent jobs (a second job wanting it waits in the queue), and removes what it
created when the job settles. Where the path cannot be created, submit fails and says to pass the Data
as an argument instead.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic_tui.core.accelerators import category, format_accelerator, parse_accelerator
from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.supervisor import process as queue_watcher
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.training.entry import PREEMPTED_EXIT_CODE
from kinetic_tui.core.profiles import PROFILE_NAME_RULE
from kinetic_tui.core.storage import bucket_storage
from kinetic_tui.core.store import Store

DEFAULT_POOL = "cpu"
CANCEL_GRACE = 5.0
LAUNCH_WINDOW = 60.0  # a claimed job with no processes after this long lost its scheduler
_ENV_PASSTHROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "USER", "LOGNAME",
                    "SYSTEMROOT", "STORAGE_EMULATOR_HOST", "KINETIC_HOME")


class SubmitError(KineticError):
    """The job cannot be placed at all (no matching pool, too few nodes, an unusable volume path)."""


@dataclass(frozen=True)
class Pool:
    name: str
    accelerator: str
    nodes: int
    spot: bool
    in_use: int
    queued: int

    @property
    def emulated(self) -> bool:
        """Every non-CPU local pool runs its jobs on this machine's CPU."""
        return category(parse_accelerator(self.accelerator)) != "cpu"


@dataclass(frozen=True)
class JobRow:
    seq: int
    job_id: str
    pool: str | None
    nodes: int
    status: JobStatus
    phase: str | None
    detail: str | None
    group_id: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    cancel_requested: bool
    hosts: tuple[HostProcess, ...] | None
    handle: dict[str, Any]
    launch: dict[str, Any]
    lane: str | None = None  # a map input: the lane (see lanes.py) it is assigned to, and its byte ranges
    log_start: int | None = None
    log_end: int | None = None
    result_at: int | None = None
    result_size: int | None = None

    @property
    def job_dir(self) -> Path:
        return Path(self.launch["job_dir"])

    @property
    def in_lane(self) -> bool:
        return lanes.is_lane_input(self.launch)


_JOB_COLUMNS = ("seq, job_id, pool, nodes, status, phase, detail, group_id, created_at, started_at, "
                "finished_at, cancel_requested, hosts, handle, launch, lane, log_start, log_end, result_at, "
                "result_size")


def _row(values: tuple[Any, ...]) -> JobRow:
    (seq, job_id, pool, nodes, status, phase, detail, group_id, created, started, finished, cancel,
     hosts, handle, launch, *lane_fields) = values
    return JobRow(seq, job_id, pool, nodes, JobStatus(status), phase, detail, group_id, created, started,
                  finished, bool(cancel),
                  None if hosts is None else tuple(HostProcess.from_dict(h) for h in json.loads(hosts)),
                  json.loads(handle), json.loads(launch), *lane_fields)


def _shape(accelerator: str) -> tuple[str, bool]:
    """(shape without spot, spot) of an accelerator string in canonical form."""
    config = parse_accelerator(accelerator)
    text = format_accelerator(config)
    return text.removesuffix(":spot"), config.spot


def _job_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_PASSTHROUGH if k in os.environ}
    env["KINETIC_HOME"] = str(kinetic_home())
    env["PYTHONUNBUFFERED"] = "1"  # the log is a file: without this a job's prints arrive only at its exit
    return env


def job_dir_for(job_id: str) -> Path:
    return kinetic_home() / "local" / "jobs" / job_id


class LocalBackend:
    """Pools, queue and processes of one KINETIC_HOME, all state in its `Store`."""

    name = "local"

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ensure_default_pool()

    # -- pools ---------------------------------------------------------------------------------------

    def _ensure_default_pool(self) -> None:
        """A fresh home has pool `cpu` with one node per core; once removed it stays removed."""
        if self.store.query("SELECT 1 FROM settings WHERE key = 'pools_initialised'"):
            return
        with self.store.transaction() as conn:
            if conn.execute("SELECT 1 FROM settings WHERE key = 'pools_initialised'").fetchone():
                return
            conn.execute("INSERT INTO pools VALUES (?, 'cpu', ?, 0, ?)",
                         (DEFAULT_POOL, os.cpu_count() or 1, time.time()))
            conn.execute("INSERT INTO settings VALUES ('pools_initialised', '1')")

    def pools(self) -> list[Pool]:
        rows = self.store.query(
            "SELECT p.name, p.accelerator, p.nodes, p.spot, "
            "COALESCE((SELECT SUM(nodes) FROM jobs j WHERE j.pool = p.name AND j.status = 'RUNNING' "
            "AND j.lane IS NULL), 0) + (SELECT COUNT(*) FROM lanes l WHERE l.pool = p.name AND l.ended_at IS NULL), "
            "(SELECT COUNT(*) FROM jobs j WHERE j.pool = p.name AND j.status = 'PENDING') "
            "FROM pools p ORDER BY p.name")
        return [Pool(n, a, nodes, bool(s), used, queued) for n, a, nodes, s, used, queued in rows]

    def pool(self, name: str) -> Pool:
        for pool in self.pools():
            if pool.name == name:
                return pool
        raise NotFoundError(f"unknown pool {name!r}; pools: {', '.join(p.name for p in self.pools()) or 'none'}")

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> Pool:
        if not isinstance(name, str) or not re.match(PROFILE_NAME_RULE, name):
            raise ValidationError(f"pool name {name!r} must match {PROFILE_NAME_RULE}")
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise ValidationError(f"--nodes must be an integer >= 1, got {nodes!r}")
        config = parse_accelerator(accelerator)
        if spot and not config.spot:
            config = parse_accelerator(format_accelerator(config) + ":spot")
        if config.num_nodes > nodes:
            raise ValidationError(f"a {format_accelerator(config)} slice needs {config.num_nodes} nodes; "
                                  f"give the pool --nodes {config.num_nodes} or more")
        with self.store.transaction() as conn:
            if conn.execute("SELECT 1 FROM pools WHERE name = ?", (name,)).fetchone():
                raise ValidationError(f"pool {name!r} already exists; remove it first or pick another name")
            conn.execute("INSERT INTO pools VALUES (?, ?, ?, ?, ?)",
                         (name, format_accelerator(config).removesuffix(":spot"), nodes, int(config.spot),
                          time.time()))
        return self.pool(name)

    def remove_pool(self, name: str) -> Pool:
        pool = self.pool(name)
        with self.store.transaction() as conn:
            active = conn.execute("SELECT COUNT(*) FROM jobs WHERE pool = ? AND status IN ('PENDING', 'RUNNING')",
                                  (name,)).fetchone()[0]
            if active:
                raise ValidationError(f"pool {name!r} has {active} pending or running jobs; cancel them first")
            conn.execute("DELETE FROM pools WHERE name = ?", (name,))
        return pool

    def _match_pool(self, accelerator: str, num_nodes: int) -> str:
        shape, spot = _shape(accelerator)
        pools = self.pools()
        for pool in pools:
            if pool.accelerator == shape and pool.spot == spot:
                if pool.nodes < num_nodes:
                    raise SubmitError(f"pool {pool.name!r} has {pool.nodes} nodes but {accelerator} needs "
                                      f"{num_nodes}; grow it or add a bigger pool")
                return pool.name
        listing = ", ".join(f"{p.name} ({p.accelerator}{' spot' if p.spot else ''}, {p.nodes} nodes)"
                            for p in pools) or "none"
        spot_flag = " --spot" if spot else ""
        raise SubmitError(f"no pool provides {accelerator}; pools: {listing}. Add one: kinetic-tui pool add "
                          f"NAME --accelerator {shape} --nodes {num_nodes}{spot_flag}")

    # -- submission ------------------------------------------------------------------------------------

    def place(self, accelerator: str, num_nodes: int, volumes: tuple[str, ...] = ()) -> str:
        """Choose the pool and check volume paths; raises before anything is created."""
        pool = self._match_pool(accelerator, num_nodes)
        held = {path for (path,) in self.store.query("SELECT path FROM volume_locks")}
        for path in volumes:
            if path not in held:  # a path a job holds exists only for that job; this one queues behind it
                _check_volume_path(path)
        return pool

    def submit(self, handle: dict[str, Any], runner_args: list[str], volumes: tuple[str, ...] = (),
               group_id: str | None = None) -> JobRow:
        """Queue the job (PENDING) and start whatever the pool can run now."""
        job_id = handle["job_id"]
        job_dir = job_dir_for(job_id)
        job_dir.mkdir(parents=True, exist_ok=True)
        output_dir = Path(handle["output_dir"]) if handle.get("output_dir") else None
        launch = {"job_dir": str(job_dir), "runner_args": list(runner_args), "argv": [*runner_args, "--workdir", "."],
                  "volumes": list(volumes), "output_dir": str(output_dir) if output_dir else None}
        self._queue([(handle, launch)], group_id)
        return self.job(job_id)

    def submit_lane_inputs(self, inputs: list[tuple[dict[str, Any], dict[str, Any]]], group_id: str) -> None:
        """Queue a map's inputs for lanes: (handle, lane_input) each, one transaction, no per-job files."""
        self._queue([(handle, {"job_dir": str(job_dir_for(handle["job_id"])), "lane_input": lane_input,
                               "output_dir": handle["output_dir"], "volumes": []})
                     for handle, lane_input in inputs], group_id)

    def _queue(self, jobs: list[tuple[dict[str, Any], dict[str, Any]]], group_id: str | None) -> None:
        """Insert the jobs PENDING and start whatever their pools can run now."""
        with self.store.transaction() as conn:
            conn.executemany(
                "INSERT INTO jobs (job_id, backend, pool, nodes, status, group_id, created_at, handle, launch) "
                "VALUES (?, 'local', ?, ?, 'PENDING', ?, ?, ?, ?)",
                [(handle["job_id"], handle["pool"], handle["num_nodes"], group_id, handle["created_at"],
                  json.dumps(handle), json.dumps(launch)) for handle, launch in jobs])
        ids = [handle["job_id"] for handle, _ in jobs]
        for pool in dict.fromkeys(handle["pool"] for handle, _ in jobs):
            self.schedule(pool)
        if self._any_pending(ids):
            self.reconcile()  # jobs that ended while nobody looked may still hold the nodes; settling starts us
            if self._any_pending(ids):
                queue_watcher.ensure_running()

    def _any_pending(self, job_ids: list[str]) -> bool:
        last = job_ids[-1]  # FIFO: if the last one started, all did; a batch's lanes claim in order too
        return bool(self.store.query("SELECT 1 FROM jobs WHERE job_id = ? AND status = 'PENDING'", (last,)))

    # -- queries -------------------------------------------------------------------------------------

    def job(self, job_id: str) -> JobRow:
        rows = self.store.query(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        if not rows:
            raise NotFoundError(self.unknown_job_message(job_id))
        return _row(rows[0])

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

    def unknown_job_message(self, job_id: str) -> str:
        ids = [r[0] for r in self.store.query("SELECT job_id FROM jobs ORDER BY seq DESC LIMIT 2000")]
        near = difflib.get_close_matches(job_id, ids, n=5, cutoff=0.5) or ids[:5]
        return f"unknown job {job_id!r}; " + (f"nearby ids: {', '.join(near)}" if near else "no jobs yet")

    def jobs(self, status: JobStatus | None = None, group_id: str | None = None,
             limit: int | None = None) -> list[JobRow]:
        """Newest first; finished jobs included (the store keeps history)."""
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status.value)
        if group_id is not None:
            where.append("group_id = ?")
            params.append(group_id)
        sql = f"SELECT {_JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_row(r) for r in self.store.query(sql, tuple(params))]

    # -- scheduling ----------------------------------------------------------------------------------

    def schedule(self, pool_name: str | None = None) -> list[str]:
        """Start the queue heads that fit, per pool, in submission order; return the job ids started (for
        a lane, the ids of its inputs)."""
        claimed, assigned = self._claim(pool_name)
        for row in claimed:
            self._launch(row)
        for assignment in assigned:
            self._launch_lane(assignment)
        return [row.job_id for row in claimed] + [job_id for a in assigned for job_id, _ in a.inputs]

    def _claim(self, pool_name: str | None) -> tuple[list[JobRow], list[lanes.Assignment]]:
        """Walk each pool's queue in order: a job that fits is claimed; a map input at the head opens a
        lane that takes a chunk of its batch. The first head that does not fit blocks the rest."""
        now = time.time()
        claimed: list[JobRow] = []
        assigned: list[lanes.Assignment] = []
        with self.store.transaction() as conn:
            pools = conn.execute("SELECT name, nodes FROM pools" + (" WHERE name = ?" if pool_name else ""),
                                 (pool_name,) if pool_name else ()).fetchall()
            for name, capacity in pools:
                used = lanes.nodes_in_use(conn, name)
                pending = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE pool = ? AND status = 'PENDING' "
                                       "AND lane IS NULL ORDER BY seq", (name,)).fetchall()
                taken: set[str] = set()
                for values in pending:
                    if values[1] in taken:  # a lane opened in this pass took it (checked before decoding the row)
                        continue
                    row = _row(values)
                    room = self._group_room(conn, row.group_id)
                    if used + row.nodes > capacity or room == 0:
                        break
                    if row.in_lane and row.group_id is not None:
                        free = capacity - used if room is None else min(capacity - used, room)
                        assignment = lanes.assign(conn, row.group_id, name, free, now)
                        taken.update(job_id for job_id, _ in assignment.inputs)
                        assigned.append(assignment)
                        used += 1
                        continue
                    if not self._lock_volumes(conn, row):
                        break
                    conn.execute("UPDATE jobs SET status = 'RUNNING', started_at = ? WHERE job_id = ?",
                                 (now, row.job_id))
                    used += row.nodes
                    claimed.append(row)
        return claimed, assigned

    @staticmethod
    def _group_room(conn: Any, group_id: str | None) -> int | None:
        """How many more of the group may run (None: no limit)."""
        if group_id is None:
            return None
        limit = conn.execute("SELECT max_concurrent FROM job_groups WHERE group_id = ?", (group_id,)).fetchone()
        if limit is None or limit[0] is None:
            return None
        return max(limit[0] - lanes.group_running(conn, group_id), 0)

    @staticmethod
    def _lock_volumes(conn: Any, row: JobRow) -> bool:
        paths = row.launch.get("volumes") or []
        for path in paths:
            holder = conn.execute("SELECT job_id FROM volume_locks WHERE path = ?", (path,)).fetchone()
            if holder is not None and holder[0] != row.job_id:
                return False
        for path in paths:
            conn.execute("INSERT OR IGNORE INTO volume_locks VALUES (?, ?)", (path, row.job_id))
        return True

    def _launch(self, row: JobRow) -> None:
        env = _job_env()
        env["KINETIC_JOB_ID"] = row.job_id
        if row.launch.get("output_dir"):
            env["KINETIC_OUTPUT_DIR"] = row.launch["output_dir"]
        created: list[str] = []
        try:
            for path in row.launch.get("volumes") or []:
                created.append(_create_volume_root(path))
                _write_json(row.job_dir / "volumes.json", created)  # after each: a failed launch removes them
            hosts = launcher.launch(row.job_dir, list(row.launch["argv"]), env, hosts=row.nodes)
        except (KineticError, OSError) as exc:
            self._finish(row.job_id, JobStatus.FAILED, "launch", f"could not start the job: {exc}")
            return
        self.store.write("UPDATE jobs SET hosts = ? WHERE job_id = ?",
                         (json.dumps([h.to_dict() for h in hosts]), row.job_id))

    def _launch_lane(self, assignment: lanes.Assignment) -> None:
        """Start the lane's runner; if it cannot start, the lane is closed at once and its inputs fail."""
        try:
            hosts = launcher.launch(assignment.lane.dir, lanes.write_spec(assignment), _job_env())
        except (KineticError, OSError) as exc:
            with self.store.transaction() as conn:
                conn.execute("UPDATE jobs SET status = 'FAILED', phase = 'launch', detail = ?, finished_at = ? "
                             "WHERE lane = ? AND status = 'PENDING'",
                             (f"could not start the lane: {exc}", time.time(), assignment.lane.lane_id))
                conn.execute("UPDATE lanes SET ended_at = ? WHERE lane_id = ?", (time.time(), assignment.lane.lane_id))
            return
        lanes.record_launch(self.store, assignment.lane.lane_id, hosts)

    # -- settling ------------------------------------------------------------------------------------

    def reconcile(self, job_id: str | None = None) -> list[str]:
        """Settle RUNNING jobs whose processes are done (or gone) and apply their lanes' progress; then
        start what fits. Returns settled ids."""
        if job_id:
            row = self.job(job_id)
            rows = [] if row.in_lane else [row]
            lane = lanes.get(self.store, row.lane) if row.lane else None
            open_lanes = [lane] if lane else []
        else:
            rows = [row for row in self.jobs(status=JobStatus.RUNNING) if not row.in_lane]
            open_lanes = lanes.active(self.store)
        settled, pools = [], set()
        for row in rows:
            if row.status is not JobStatus.RUNNING:
                continue
            outcome = self._outcome(row)
            if outcome is not None and self._finish(row.job_id, *outcome):
                settled.append(row.job_id)
                pools.add(row.pool)
        settled += self.observe_lanes(open_lanes, pools)
        for pool in pools:
            self.schedule(pool)
        if job_id is None and not pools:
            self.schedule()
        return settled

    def observe_lanes(self, open_lanes: list[lanes.Lane], pools: set[str | None] | None = None,
                      patient: bool = True) -> list[str]:
        """Apply the lanes' progress (see `lanes.observe` for `patient`); a closed lane frees its node, so
        its pool goes into `pools` (or, without `pools`, is scheduled at once)."""
        settled, freed = [], set()
        for lane in open_lanes:
            done, closed = lanes.observe(self.store, lane, patient)
            settled += done
            if closed:
                _discard(lane.dir / "work")
                freed.add(lane.pool)
        if pools is None:
            for pool in freed:
                self.schedule(pool)
        else:
            pools.update(freed)
        return settled

    def _outcome(self, row: JobRow) -> tuple[JobStatus, str | None, str | None] | None:
        """(status, phase, detail) once every host is done, or None while it runs."""
        if row.hosts is None:
            if time.time() - (row.started_at or 0) < LAUNCH_WINDOW:
                return None  # being launched right now by another process
            return JobStatus.FAILED, "lost", "the job was claimed but its processes never started"
        codes = [launcher.exit_code(row.job_dir, h.host) for h in row.hosts]
        if any(code is None for code in codes):
            if any(code is None and h.is_alive() for h, code in zip(row.hosts, codes)):
                return None
            codes = self._await_exit_files(row, codes)
        if row.cancel_requested:
            return JobStatus.CANCELLED, None, "cancelled"
        return self._judge(row, codes)

    @staticmethod
    def _await_exit_files(row: JobRow, codes: list[int | None], patience: float = 0.05) -> list[int | None]:
        """The processes are gone; a reaper may be writing their exit files right now: give it `patience`."""
        deadline = time.monotonic() + patience
        while any(code is None for code in codes) and time.monotonic() < deadline:
            time.sleep(0.002)
            codes = [launcher.exit_code(row.job_dir, h.host) for h in row.hosts or ()]
        return codes

    def _judge(self, row: JobRow, codes: list[int | None]) -> tuple[JobStatus, str | None, str | None]:
        storage = bucket_storage(row.handle["bucket"], row.handle["result_uri"])
        summaries = {}
        for host in range(row.nodes):
            name = "result.json" if host == 0 else f"result-worker-{host}.json"
            try:
                summaries[host] = json.loads(storage.get_bytes(f"{row.job_id}/{name}"))
            except NotFoundError:
                pass
        for host, code in enumerate(codes):
            summary = summaries.get(host)
            if summary is not None and not summary["success"]:
                where = "" if row.nodes == 1 else f"host {host}: "
                return JobStatus.FAILED, summary["phase"], f"{where}{summary['error_type']}: {summary['error']}"
            if code is None:
                return JobStatus.FAILED, "lost", f"host {host} vanished without an exit status or result"
            if code == PREEMPTED_EXIT_CODE and summary is None:
                return JobStatus.FAILED, "preempted", (f"host {host} stopped as preempted (exit {code}, EX_TEMPFAIL); "
                                                       "a training resumes from its last checkpoint")
            if code != 0:
                return JobStatus.FAILED, "lost" if code < 0 else "runner", f"host {host} exited with {code}"
        if 0 not in summaries:
            return JobStatus.FAILED, "lost", "the job exited without writing its result"
        return JobStatus.SUCCEEDED, None, None

    def _finish(self, job_id: str, status: JobStatus, phase: str | None, detail: str | None) -> bool:
        """Settle a job once (a concurrent settler loses quietly) and release its volumes.

        The paths are removed before their locks go, in the same transaction: a job queued for the same
        path may be launched the moment the lock is released and must find the path free.
        """
        with self.store.transaction() as conn:
            changed = conn.execute(
                "UPDATE jobs SET status = ?, phase = ?, detail = ?, finished_at = ? "
                "WHERE job_id = ? AND status IN ('PENDING', 'RUNNING')",
                (status.value, phase, detail, time.time(), job_id)).rowcount
            if changed and conn.execute("SELECT 1 FROM volume_locks WHERE job_id = ?", (job_id,)).fetchone():
                _remove_volume_roots(job_dir_for(job_id))
            conn.execute("DELETE FROM volume_locks WHERE job_id = ?", (job_id,))
        return bool(changed)

    def cancel(self, job_id: str, grace: float = CANCEL_GRACE) -> JobRow:
        """PENDING: cancelled at once. RUNNING: SIGTERM, then SIGKILL after `grace`, then CANCELLED."""
        row = self.job(job_id)
        if row.status.finished:
            return row
        if row.lane is not None:
            return self._cancel_in_lane(row, grace)
        with self.store.transaction() as conn:
            conn.execute("UPDATE jobs SET cancel_requested = 1 WHERE job_id = ?", (job_id,))
            conn.execute("UPDATE jobs SET status = 'CANCELLED', detail = 'cancelled', finished_at = ? "
                         "WHERE job_id = ? AND status = 'PENDING'", (time.time(), job_id))
        row = self.job(job_id)
        if row.status is JobStatus.CANCELLED:
            self.schedule(row.pool)  # a cancelled queue head may have been blocking the jobs behind it
        elif row.status is JobStatus.RUNNING:
            deadline = time.monotonic() + LAUNCH_WINDOW
            while row.hosts is None and time.monotonic() < deadline:  # wait out a launch in flight
                time.sleep(0.01)
                row = self.job(job_id)
            if row.hosts:
                launcher.terminate(row.hosts, grace=grace)
            self._finish(job_id, JobStatus.CANCELLED, None, "cancelled")
            self.schedule(row.pool)
        return self.job(job_id)

    def _cancel_in_lane(self, row: JobRow, grace: float) -> JobRow:
        """Mark it cancelled, ask its lane to skip it, then read the lane's progress: if the lane has
        already started it, stop the lane (its other inputs go back to the queue). The order matters: see
        the lane protocol in runner/remote_runner.py."""
        with self.store.transaction() as conn:
            conn.execute("UPDATE jobs SET cancel_requested = 1 WHERE job_id = ?", (row.job_id,))
            conn.execute("UPDATE jobs SET status = 'CANCELLED', detail = 'cancelled', finished_at = ? "
                         "WHERE job_id = ? AND status = 'PENDING'", (time.time(), row.job_id))
        lane = lanes.get(self.store, row.lane or "")
        if lane is not None and lane.ended_at is None:
            lanes.request_skip(lane, row.job_id)
            self.observe_lanes([lane])
            lane, current = lanes.get(self.store, lane.lane_id), self.job(row.job_id)
            if lane and lane.hosts and lane.ended_at is None and current.log_start is not None \
                    and current.log_end is None:
                launcher.terminate(lane.hosts, grace=grace)
                self.observe_lanes([lane])
        self.schedule(row.pool)
        return self.job(row.job_id)

    def wait(self, job_id: str, timeout: float | None = None,
             on_poll: Callable[[], None] | None = None) -> JobRow:
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
            if row.status is JobStatus.RUNNING and row.hosts is not None:
                if all(launcher.exit_code(row.job_dir, h.host) is not None for h in row.hosts):
                    self.reconcile(job_id)
                    continue
            if time.monotonic() - last_full > 0.5:  # the slow path: liveness checks, queue heads
                last_full = time.monotonic()
                if row.status is JobStatus.RUNNING or row.lane is not None:
                    self.reconcile(job_id)
                else:
                    self.schedule(row.pool)
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {row.status.value} after {timeout} s; it keeps running")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    # -- logs ------------------------------------------------------------------------------------------

    def log_paths(self, row: JobRow) -> list[Path]:
        return [launcher.log_path(row.job_dir, host) for host in range(row.nodes)]

    def read_logs(self, job_id: str, follow: bool = False, poll: float = 0.05,
                  stop: threading.Event | None = None) -> Iterator[list[str]]:
        """Batches of complete lines; with `follow`, keeps reading until the job settles (or `stop` is set)
        and the files end. Multi-host jobs prefix each line with its host."""
        reader = self.log_reader(job_id)
        while True:
            batch = reader.read()
            if batch:
                yield batch
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

    def cleanup(self, job_id: str) -> None:
        """Remove the job's working directories (logs and result stay; a lane removes its own)."""
        row = self.refresh(job_id)
        if not row.status.finished:
            raise ValidationError(f"job {job_id} is {row.status.value}; cancel it or wait before cleanup")
        if not row.in_lane:
            _discard(row.job_dir / "work")

    def log_reader(self, job_id: str) -> _LogReader:
        row = self.job(job_id)
        return _LaneLogReader(self, job_id) if row.in_lane else _LogReader(self.log_paths(row))

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
        return data[row.result_at:row.result_at + row.result_size]

    def group_statuses(self, group_id: str) -> dict[str, tuple[JobStatus, float | None]]:
        """job_id -> (status, finished_at) for a batch: what a waiting client polls, without decoding rows."""
        return {job_id: (JobStatus(status), finished) for job_id, status, finished in self.store.query(
            "SELECT job_id, status, finished_at FROM jobs WHERE group_id = ?", (group_id,))}


_trash_lock = threading.Lock()
_emptying = False


def _discard(path: Path) -> None:
    """Remove a directory tree off the caller's path: rename it into the workspace trash (one cheap
    metadata operation) and empty the trash in a background thread. Whatever an exiting process leaves
    in the trash is emptied by the next one."""
    trash = kinetic_home() / "local" / "trash"
    trash.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, trash / f"{path.parent.name}-{path.name}-{os.getpid()}-{time.monotonic_ns()}")
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    global _emptying
    with _trash_lock:
        if _emptying:
            return
        _emptying = True
    threading.Thread(target=_empty_trash, args=(trash,), name="kinetic-trash", daemon=True).start()


def _empty_trash(trash: Path) -> None:
    global _emptying
    try:
        while True:
            entries = list(trash.iterdir())
            if not entries:
                return
            for entry in entries:
                shutil.rmtree(entry, ignore_errors=True)
    finally:
        with _trash_lock:
            _emptying = False


class _LogReader:
    """Incremental reader of one job's host logs: only whole lines, each file from where it stopped."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self.offsets = [0] * len(paths)
        self.partial = [""] * len(paths)
        self.ends: list[int | None] = [None] * len(paths)  # stop reading a file there (None: its end)

    def _prefix(self, host: int) -> str:
        return f"[host {host}] " if len(self.paths) > 1 else ""

    def read(self) -> list[str]:
        batch: list[str] = []
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.offsets[i])
                    end = self.ends[i]
                    chunk = fh.read() if end is None else fh.read(max(end - self.offsets[i], 0))
            except FileNotFoundError:
                continue
            self.offsets[i] += len(chunk)
            lines = (self.partial[i] + chunk.decode("utf-8", "replace")).split("\n")
            self.partial[i] = lines.pop()
            batch.extend(self._prefix(i) + line for line in lines)
        return batch

    def rest(self) -> list[str]:
        """The unterminated last line of each file (a job killed mid-line)."""
        rest = [self._prefix(i) + text for i, text in enumerate(self.partial) if text]
        self.partial = [""] * len(self.paths)
        return rest


class _LaneLogReader(_LogReader):
    """A map input's range of its lane's log, found once the lane has reached the input.

    While the input runs its end is unknown, so each read stops at the file's size taken *before* the
    lane's progress is applied: the lane writes an input's `end` line before the next input prints
    anything, so bytes written before that size belong to this input unless the `end` applied after it
    says where the input stopped."""

    def __init__(self, backend: LocalBackend, job_id: str) -> None:
        super().__init__([])
        self.backend, self.job_id = backend, job_id
        self.final = False

    def read(self) -> list[str]:
        if not self.final:
            if not self.paths and not self._locate():
                return []
            size = self.paths[0].stat().st_size
            row = self._observed()
            self.final = row.log_end is not None or row.status.finished
            self.ends = [row.log_end if self.final else size]
        return super().read()

    def _observed(self) -> JobRow:
        """The input's row after applying its lane's progress."""
        row = self.backend.job(self.job_id)
        lane = lanes.get(self.backend.store, row.lane) if row.lane else None
        if lane is not None and lane.ended_at is None:
            self.backend.observe_lanes([lane], patient=False)
            row = self.backend.job(self.job_id)
        return row

    def _locate(self) -> bool:
        row = self._observed()
        lane = lanes.get(self.backend.store, row.lane) if row.lane else None
        if lane is None or row.log_start is None:
            return False
        self.paths, self.offsets, self.partial = [launcher.log_path(lane.dir, 0)], [row.log_start], [""]
        return True


# -- volumes -------------------------------------------------------------------------------------------


def _missing_top(target: Path) -> Path:
    """The topmost directory of `target` that does not exist yet: what a job creates and later removes."""
    top = target
    while not top.parent.exists():
        top = top.parent
    return top


def _check_volume_path(path: str) -> None:
    """Refuse host paths that exist or cannot be created. Creating is tried for real (then undone): write
    permission bits say nothing for root, nor for read-only mounts and pseudo file systems like /proc."""
    target = Path(path)
    hint = "pass the Data as a function argument instead (it arrives as a local path)"
    if target.exists():
        raise SubmitError(f"volume path {path} already exists on this machine and the local backend never "
                          f"overwrites host paths; choose a path that does not exist, or {hint}")
    top = _missing_top(target)
    try:
        top.mkdir()
        top.rmdir()
    except OSError as exc:
        raise SubmitError(f"cannot create volume path {path} here ({top}: {exc.strerror}); {hint}") from None


def _create_volume_root(path: str) -> str:
    """Return the topmost directory that did not exist (removed again when the job settles)."""
    target = Path(path)
    top = _missing_top(target)
    if target.exists():
        raise SubmitError(f"volume path {path} appeared on the host before the job started; refusing to use it")
    target.parent.mkdir(parents=True, exist_ok=True)
    return str(top)


def _remove_volume_roots(job_dir: Path) -> None:
    try:
        created = json.loads((job_dir / "volumes.json").read_text())
    except FileNotFoundError:
        return
    for top in created:
        path = Path(top)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
