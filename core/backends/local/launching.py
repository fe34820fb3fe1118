"""Starting the processes of claimed local jobs and lanes, after their claim has committed, and finishing
the launch of a job whose launcher died (from its launch records, see launch_files.py).

A launch that failed is judged by who holds it: if nothing of it runs or ever will (`launcher.abandon`),
the job fails at once; if a spawner took it (and was killed after forking, before it replied), the job
runs and whoever looks next adopts its processes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace

from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.backends.local.settling import finish, requeue
from kinetic_tui.core.backends.local.volumes import create_volume_root, write_json
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo

log = logging.getLogger(__name__)

_ENV_PASSTHROUGH = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "USER",
    "LOGNAME",
    "SYSTEMROOT",
    "STORAGE_EMULATOR_HOST",
    "KINETIC_HOME",
)


def job_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_PASSTHROUGH if k in os.environ}
    env["KINETIC_HOME"] = str(kinetic_home())
    env["PYTHONUNBUFFERED"] = "1"  # the log is a file: without this a job's prints arrive only at its exit
    return env


def start_claimed(store: Store, claimed: list[JobRow], assigned: list[lanes.Assignment]) -> None:
    """Start every claimed job and lane, each on its own: one whose start raises is failed with the error
    (launch_job, launch_lane) and the others still start, since a claim not started by a launcher that
    lives on is never given up by anyone else. Only an interrupt (KeyboardInterrupt, SystemExit) stops
    the rest; the launcher is then dying, and whoever looks next gives up the claims it left."""
    for row in claimed:
        launch_job(store, row)
    for assignment in assigned:
        launch_lane(store, assignment)


def launch_job(store: Store, row: JobRow) -> None:
    """Create the job's volume paths and start its hosts; if that fails, the job fails (phase launch) with
    the error, whatever it was. Raises only an interrupt."""
    env = job_env()
    env["KINETIC_JOB_ID"] = row.job_id
    if row.launch.get("output_dir"):
        env["KINETIC_OUTPUT_DIR"] = row.launch["output_dir"]
    created: list[str] = []
    try:
        for path in row.launch.get("volumes") or []:
            created.append(create_volume_root(path))
            write_json(row.job_dir / "volumes.json", created)  # after each: a failed launch removes them
        token = launcher.claim_token(row.job_dir)
        hosts = launcher.launch(row.job_dir, list(row.launch["argv"]), env, hosts=row.nodes, token=token)
    except BaseException as exc:
        starter_lost = isinstance(exc, launcher.StarterLost)

        def fail(why: str) -> None:
            if not launcher.abandon(row.job_dir):
                return
            if starter_lost:
                requeue(store, _current(store, row), token, why)
            else:
                _fail_launch(store, row.job_id, f"could not start the job: {why}")

        _given_up(row.job_id, exc, fail)
        return
    _recorded(row.job_id, lambda: jobs_repo.record_hosts(store, row.job_id, [h.to_dict() for h in hosts]))


def _why(exc: BaseException) -> str:
    """A deliberate error's message; a bug's type too, so the row says what broke."""
    return str(exc) if isinstance(exc, (KineticError, OSError)) else f"{type(exc).__name__}: {exc}"


def _given_up(what: str, exc: BaseException, give_up: Callable[[str], None]) -> None:
    """After a start raised: give the launch up (and fail it with why) unless a spawner took it; re-raise
    only an interrupt, and log a failure that is not a deliberate error (a bug) where the launcher's log
    shows it."""
    try:
        give_up(_why(exc))
    except Exception:  # the store refused the failure: the claim stays for whoever looks next
        log.exception("could not record the failed start of %s", what)
    if not isinstance(exc, Exception):
        raise exc
    if not isinstance(exc, (KineticError, OSError)):
        log.error("starting %s raised", what, exc_info=exc)


def _recorded(what: str, record: Callable[[], object]) -> None:
    """Record started processes; if the store refuses, the launch records still name them and whoever looks
    next adopts them (adopt_launch), so the other claims still start."""
    try:
        record()
    except Exception:
        log.exception("could not record the processes of %s", what)


def _current(store: Store, row: JobRow) -> JobRow:
    """The row as the store has it now (a cancel may have come in while it was being started)."""
    values = jobs_repo.get(store, row.job_id)
    return row if values is None else JobRow.from_values(values)


def _fail_launch(store: Store, job_id: str, detail: str) -> None:
    """A launch given up by a cancel (which gives it up first) ends the job CANCELLED, whoever settles first."""
    values = jobs_repo.get(store, job_id)
    if values is not None and JobRow.from_values(values).cancel_requested:
        finish(store, job_id, JobStatus.CANCELLED, None, "cancelled")
    else:
        finish(store, job_id, JobStatus.FAILED, "launch", detail)


def launch_lane(store: Store, assignment: lanes.Assignment) -> None:
    """Start the lane's runner; if it cannot start, the lane is closed at once and its inputs fail with the
    error. Raises only an interrupt."""
    lane = assignment.lane
    try:
        hosts = launcher.launch(lane.dir, lanes.write_spec(assignment), job_env(), token=launcher.claim_token(lane.dir))
    except BaseException as exc:
        starter_lost = isinstance(exc, launcher.StarterLost)

        def fail(why: str) -> None:
            if not launcher.abandon(lane.dir):
                return
            if starter_lost:
                lanes_repo.give_back(store, lane.lane_id, time.time())
            else:
                lanes_repo.fail_launch(store, lane.lane_id, f"could not start the lane: {why}", time.time())

        _given_up(lane.lane_id, exc, fail)
        return
    _recorded(lane.lane_id, lambda: lanes.record_launch(store, lane.lane_id, hosts))


def adopt_launch(store: Store, row: JobRow) -> tuple[JobRow | None, bool]:
    """A claimed job without recorded processes: (the row with the processes its spawner started, False),
    or (None, True) once it is known that nothing more of it will start: a job none of whose hosts ran goes
    back to the queue, one whose spawner died part-way fails with its started hosts stopped. (None, False)
    while its launch is in flight."""
    state = launcher.launch_state(row.job_dir, row.nodes)
    if state.complete:
        jobs_repo.record_hosts(store, row.job_id, [h.to_dict() for h in state.started])
        return replace(row, hosts=tuple(state.started)), False
    if state.failed is None:
        return None, False
    if state.started:
        launcher.terminate(state.started, grace=0)
        finish(store, row.job_id, JobStatus.FAILED, "launch", f"{state.failed}; its started hosts were stopped")
    else:
        requeue(store, row, state.token, state.failed)
    return None, True
