"""`doctor`: check a home and, with `repair`, fix what can be fixed, one finding per check.

The checks: the home's permissions, the store (opens, full integrity check, schema version), the workspace
supervisor (missing while work is due), the fork server (answers when it holds its lock), orphaned work
processes (a job's or lane's process whose row is settled or closed), launches no live process will finish
(launches.py) and jobs on disk without a row.

Decisions: without `repair` nothing under the home changes (the home is inspected as found, not tightened);
with it, the repairs run first (permissions, a lost store created, missing rows rebuilt, orphans stopped,
the supervisor started when work is due) and the checks then run again, so the findings say what is left.
A job whose files are younger than SUBMIT_WINDOW is being submitted right now and is not judged.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.local import forkserver, forkserver_client, lanes, launcher
from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.doctor import launches, permissions, rows
from kinetic_tui.core.doctor.processes import WorkProcess, work_processes
from kinetic_tui.core.doctor.report import Finding, Report
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import as_found
from kinetic_tui.core.store import Store, StoreError, jobs_repo
from kinetic_tui.core.store.db import latest_schema_version, lost_file
from kinetic_tui.core.supervisor import duties
from kinetic_tui.core.supervisor import process as supervisor

SUBMIT_WINDOW = 10.0  # seconds: a handle written this recently may still be getting its row
ORPHAN_GRACE = 2.0  # SIGTERM, then SIGKILL after this long
SUPERVISOR_START = 10.0  # seconds a started supervisor may take to hold its lease
SHOWN = 5  # ids named in one finding


def examine(home: Path, repair: bool = False) -> Report:
    report = Report(home)
    if not home.is_dir():
        state = "is not a directory" if home.exists() else "does not exist"
        report.findings = [Finding("home", False, f"{home} {state}", "point KINETIC_HOME at a workspace, or run init")]
        return report
    with as_found(home):
        if repair:
            report.actions += _repair(home)
        report.findings = _check(home)
    return report


@dataclass
class _Opened:
    store: Store | None
    finding: Finding


def _check(home: Path) -> list[Finding]:
    findings = [permissions.finding(home, permissions.scan(home)), _fork_server(home)]
    with _opened(home, rebuilding=False) as opened:
        findings.insert(1, opened.finding)
        if opened.store is None:
            return findings
        backend = LocalBackend(opened.store)
        processes = work_processes(home)
        findings += [
            _supervisor(home, backend),
            _orphans(backend, processes),
            _launches(backend),
            _rows(home, backend),
        ]
    return findings


def _repair(home: Path) -> list[str]:
    actions = permissions.repair(home, permissions.scan(home))
    lost = lost_file(home / "state.db")
    with _opened(home, rebuilding=True) as opened:
        if opened.store is None:
            return actions  # a store that cannot be used is not ours to replace
        if lost is not None:
            actions.append(f"created {home / 'state.db'} (it was {lost[0]}); its job rows follow")
        backend = LocalBackend(opened.store)
        processes = work_processes(home)
        # a lost store refused every submit, so no job is being submitted: the freshest count too
        for job in _missing(home, backend, window=0.0 if lost else SUBMIT_WINDOW):
            if lost is None and rows.interrupted(job):
                actions.append(rows.discard(job))
            else:
                actions.append(rows.rebuild(backend.store, home, job, [p for p in processes if p.owner == job.job_id]))
        actions += [_stop(group) for group in _orphan_groups(backend, processes).values()]
        actions += [launches.repair(backend, stuck) for stuck in launches.stuck_launches(backend)]
        due = _due(home, backend)
        if due and supervisor.running(home) is None and supervisor.ensure_running(home):
            actions.append(f"started the workspace supervisor ({', '.join(due)} due)")
            _await_supervisor(home, backend)
    return actions


def _await_supervisor(home: Path, backend: LocalBackend) -> None:
    """Until the started supervisor holds its lease (it pauses before taking it), or has nothing left to do:
    the checks that follow must see it."""
    deadline = time.monotonic() + SUPERVISOR_START
    while supervisor.running(home) is None and _due(home, backend) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextmanager
def _opened(home: Path, rebuilding: bool) -> Iterator[_Opened]:
    path = home / "state.db"
    lost = lost_file(path)
    if lost is not None and not rebuilding:
        state, found = lost
        jobs = len(rows.jobs_on_disk(home))
        yield _Opened(
            None,
            Finding(
                "store",
                False,
                f"{path} is {state} but this home holds job data ({found})",
                f"--repair creates it and rebuilds the rows of {jobs} jobs from their files "
                f"(trainings, versions and other records are not rebuilt; restore a backup for those)",
            ),
        )
        return
    try:
        store = Store(path, rebuilding=rebuilding)
    except (StoreError, OSError) as exc:
        yield _Opened(None, Finding("store", False, str(exc)))
        return
    try:
        yield _Opened(store, _integrity(store))
    finally:
        store.close()


def _integrity(store: Store) -> Finding:
    problems = store.integrity_problems()
    if problems:
        return Finding(
            "store", False, f"{store.path} fails its integrity check: {'; '.join(problems)}", "restore it from a backup"
        )
    version, latest = store.schema_version(), latest_schema_version()
    if version != latest:
        return Finding("store", False, f"{store.path} has schema version {version}, expected {latest}")
    return Finding("store", True, f"{store.path} passes its integrity check (schema version {version})")


def _due(home: Path, backend: LocalBackend) -> list[str]:
    from kinetic_tui.core.backends.registry import backend_for
    from kinetic_tui.core.profiles import resolve_infra

    return [duty.name for duty in duties.due(duties.Supervised(home, backend, lambda: backend_for(resolve_infra())))]


def _supervisor(home: Path, backend: LocalBackend) -> Finding:
    pid = supervisor.running(home)
    if pid is not None:
        return Finding("supervisor", True, f"running (pid {pid})" if pid else "starting")
    try:
        due = _due(home, backend)
    except KineticError as exc:
        return Finding("supervisor", False, f"not running, and its duties cannot be judged: {exc}")
    if due:
        return Finding("supervisor", False, f"not running while work is due ({', '.join(due)})", "--repair starts it")
    return Finding("supervisor", True, "not running; nothing is due")


def _fork_server(home: Path) -> Finding:
    run = home / "run"
    try:
        status = forkserver_client.server_status(run)
    except forkserver_client.ForkServerUnavailable as exc:
        return Finding("fork server", False, str(exc), "jobs start cold meanwhile")
    if status is not None:
        return Finding("fork server", True, f"running (pid {status['pid']}, {len(status['children'])} job processes)")
    if _locked(run / forkserver.LOCK_NAME):
        return Finding(
            "fork server",
            False,
            f"holds {run / forkserver.LOCK_NAME} but does not answer (stopped?)",
            "resume it (kill -CONT) or kill it; the next job starts a fresh one",
        )
    return Finding("fork server", True, "not running; the next job starts it")


def _locked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _orphan_groups(backend: LocalBackend, processes: list[WorkProcess]) -> dict[int, list[WorkProcess]]:
    """Work processes whose job is settled or whose lane is closed, by process group."""
    groups: dict[int, list[WorkProcess]] = {}
    for process in processes:
        if process.lane:
            lane = lanes.get(backend.store, process.owner)
            owned = lane is not None and lane.ended_at is None
        else:
            values = jobs_repo.get(backend.store, process.owner)
            # no row: a job to rebuild (its row takes these processes as its hosts), not an orphan
            owned = values is None or not JobStatus(values[4]).finished
        if not owned:
            groups.setdefault(process.pgid, []).append(process)
    return groups


def _orphans(backend: LocalBackend, processes: list[WorkProcess]) -> Finding:
    groups = _orphan_groups(backend, processes)
    if not groups:
        return Finding("processes", True, f"{len(processes)} work processes, each of a running job or open lane")
    named = sorted({p.owner for group in groups.values() for p in group})
    pids = sorted(p.pid for group in groups.values() for p in group)
    return Finding(
        "processes",
        False,
        f"{len(pids)} orphaned processes (pids {_few(pids)}) of settled jobs or closed lanes ({_few(named)})",
        "--repair stops them",
    )


def _launches(backend: LocalBackend) -> Finding:
    stuck = launches.stuck_launches(backend)
    if not stuck:
        return Finding("launches", True, "every launch in progress has a live launcher or spawner")
    shown = "; ".join(f"{s.owner}: {s.problem}" for s in stuck[:SHOWN])
    more = f"; and {len(stuck) - SHOWN} more" if len(stuck) > SHOWN else ""
    return Finding(
        "launches",
        False,
        f"{len(stuck)} launches no live process will finish ({shown}{more})",
        "--repair settles them: what never ran is queued again, a partial start fails",
    )


def _stop(group: list[WorkProcess]) -> str:
    leader = min(group, key=lambda p: (p.pid != p.pgid, p.pid))
    if leader.pgid in (0, 1, os.getpgrp()):
        return f"left orphaned pid {leader.pid} alone: its process group is not its own"
    try:
        launcher.terminate([leader.as_host()], grace=ORPHAN_GRACE)
    except KineticError as exc:
        return f"could not stop orphaned process group {leader.pgid} ({leader.owner}): {exc}"
    return f"stopped orphaned process group {leader.pgid} of {leader.owner} ({len(group)} processes)"


def _missing(home: Path, backend: LocalBackend, window: float = SUBMIT_WINDOW) -> list[rows.OnDisk]:
    """Jobs on disk without a row, except those whose files are younger than `window` (being submitted)."""
    known = jobs_repo.known_ids(backend.store)
    return [
        job
        for job_id, job in rows.jobs_on_disk(home).items()
        if job_id not in known and not _fresh(job.job_dir, window) and not _fresh(job.handle, window)
    ]


def _fresh(path: Path | None, window: float) -> bool:
    with contextlib.suppress(OSError):
        return path is not None and time.time() - path.stat().st_mtime < window
    return False


def _rows(home: Path, backend: LocalBackend) -> Finding:
    missing = _missing(home, backend)
    cut = [job.job_id for job in missing if rows.interrupted(job)]
    missing = [job for job in missing if job.job_id not in cut]
    if not missing:
        message = "every job directory and handle.json has its row"
        if cut:  # never acknowledged, never ran: not a problem, only files to remove
            message += (
                f"; {len(cut)} submissions were interrupted before they were queued ({_few(cut)}: never "
                "acknowledged, never run), --repair removes their files"
            )
        return Finding("job rows", True, message)
    bare = [job.job_id for job in missing if job.handle is None]
    rebuildable = [job.job_id for job in missing if job.handle is not None]
    parts, fixes = [], []
    if rebuildable:
        parts.append(f"{len(rebuildable)} jobs on disk have no row ({_few(rebuildable)})")
        fixes.append("--repair rebuilds them from their handle.json and result files")
    if bare:
        parts.append(f"{len(bare)} job directories have neither a row nor a handle.json ({_few(bare)})")
        fixes.append(f"move those out of {home / 'local' / 'jobs'}")
    return Finding("job rows", False, "; ".join(parts), "; ".join(fixes))


def _few(items: list[object] | list[str] | list[int]) -> str:
    shown = ", ".join(str(item) for item in items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")
