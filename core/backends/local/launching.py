"""Starting the processes of claimed local jobs and lanes, after their claim has committed."""

from __future__ import annotations

import os
import time

from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.job_rows import JobRow
from kinetic_tui.core.backends.local.settling import finish
from kinetic_tui.core.backends.local.volumes import create_volume_root, write_json
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo

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


def launch_job(store: Store, row: JobRow) -> None:
    """Create the job's volume paths and start its hosts; if that fails, the job fails (phase launch)."""
    env = job_env()
    env["KINETIC_JOB_ID"] = row.job_id
    if row.launch.get("output_dir"):
        env["KINETIC_OUTPUT_DIR"] = row.launch["output_dir"]
    created: list[str] = []
    try:
        for path in row.launch.get("volumes") or []:
            created.append(create_volume_root(path))
            write_json(row.job_dir / "volumes.json", created)  # after each: a failed launch removes them
        hosts = launcher.launch(row.job_dir, list(row.launch["argv"]), env, hosts=row.nodes)
    except (KineticError, OSError) as exc:
        finish(store, row.job_id, JobStatus.FAILED, "launch", f"could not start the job: {exc}")
        return
    jobs_repo.record_hosts(store, row.job_id, [h.to_dict() for h in hosts])


def launch_lane(store: Store, assignment: lanes.Assignment) -> None:
    """Start the lane's runner; if it cannot start, the lane is closed at once and its inputs fail."""
    try:
        hosts = launcher.launch(assignment.lane.dir, lanes.write_spec(assignment), job_env())
    except (KineticError, OSError) as exc:
        lanes_repo.fail_launch(store, assignment.lane.lane_id, f"could not start the lane: {exc}", time.time())
        return
    lanes.record_launch(store, assignment.lane.lane_id, hosts)
