"""Launches no live process will finish, read from their launch records (launch_files.py).

A RUNNING job, or an open lane, whose processes the store does not hold yet is being launched. Its launch
is stuck when nobody alive is carrying it on: its claim's launcher is dead and no spawner took it (a claim
without a live launcher), or a spawner took it and died before writing every host's started record (a
spawn token without a started record), or its launcher gave it up and died before settling the job.
A launch whose hosts all started is stuck too once its launcher is dead: nobody records them.

Reading is side-effect free: `launcher.launch_state` would abandon a dead launcher's launch, which only a
repair may do. The repair is the backend's own recovery (`reconcile`, which starts nothing itself): what
never ran goes back to the queue, what partly started fails with its started hosts stopped, what fully
started is adopted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.local import lanes, launch_files
from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.job_status import JobStatus


@dataclass(frozen=True)
class StuckLaunch:
    owner: str  # a job id or a lane id
    lane: bool
    problem: str


def stuck_launches(backend: LocalBackend) -> list[StuckLaunch]:
    found = [
        StuckLaunch(row.job_id, False, problem)
        for row in backend.jobs(status=JobStatus.RUNNING)
        if not row.in_lane and row.hosts is None and (problem := judge(row.job_dir, row.nodes))
    ]
    found += [
        StuckLaunch(lane.lane_id, True, problem)
        for lane in lanes.active(backend.store)
        if lane.hosts is None and (problem := judge(lane.dir, 1))
    ]
    return found


def judge(directory: Path, hosts: int) -> str | None:
    """Why the launch recorded in `directory` will never finish by itself, or None while someone carries it."""
    where = str(directory)
    claim = launch_files.read_json(os.path.join(where, launch_files.CLAIM_NAME))
    if claim is None:
        return "claimed without a claim record"
    token, launcher = claim["token"], claim["launcher"]
    if launch_files.process_alive(launcher):
        return None  # it is launching right now, or about to record what it started
    started = [i for i in range(hosts) if os.path.exists(launch_files.started_path(where, token, i))]
    if len(started) == hosts:
        return f"its hosts started (launch {token}) but its launcher (pid {launcher[0]}) died before recording them"
    owner = launch_files.read_json(launch_files.spawn_path(where, token))
    if owner is None:
        return f"claim {token} without a live launcher (pid {launcher[0]} is gone) and no spawner took it"
    if "abandoned" in owner:
        return f"launch {token} was given up and its launcher (pid {launcher[0]}) died before settling it"
    if launch_files.process_alive(owner["spawner"]):
        return None
    missing = min(set(range(hosts)) - set(started))
    return (
        f"spawn token {token} was taken by pid {owner['spawner'][0]}, which died without a started record "
        f"for host {missing}"
    )


def repair(backend: LocalBackend, stuck: StuckLaunch) -> str:
    """Settle one stuck launch the way any reader of it would, and say what became of it."""
    if stuck.lane:
        lane = lanes.get(backend.store, stuck.owner)
        if lane is not None:
            backend.observe_lanes([lane], set())  # a set collects the freed pools: nothing is started here
        closed = lane is None or (lanes.get(backend.store, stuck.owner) or lane).ended_at is not None
        return f"settled the stuck launch of lane {stuck.owner} ({stuck.problem}): " + (
            "closed, its inputs given back" if closed else "still open"
        )
    backend.reconcile(stuck.owner, start=False)
    status = backend.job(stuck.owner).status.value
    return f"settled the stuck launch of {stuck.owner} ({stuck.problem}): now {status}"
