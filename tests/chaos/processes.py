"""Finding every kind of process of one home, reliably, from what the product itself records.

- the fork server: the holder of its lock `run/forkserver.lock` in the kernel's lock table, whose cmdline is
  `forkserver.py serve {home}/run ...`;
- the supervisor: the pid in its lease, read only while the lease is held (`supervisor.running`);
- job runners: the hosts the store records on RUNNING job rows;
- lane runners: the hosts the store records on open lanes;
- endpoint routers and instances: the pids the store records for each endpoint's router and instances (an
  instance is a job too, but it is a target of its own kind, never a `job`);
- clients: the processes the test started (it knows their pids).
Every process found is named by (pid, kernel start time), so a signal never reaches a reused pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from kinetic_tui.core.backends.local.forkserver import LOCK_NAME, ProcStat, read_proc_stat
from kinetic_tui.core.supervisor import process as supervisor

KINDS = ("forkserver", "supervisor", "lane", "job", "client", "router", "instance")


@dataclass(frozen=True)
class Target:
    kind: str
    pid: int
    start_time: int
    jobs: tuple[str, ...] = field(default=())  # the job ids it runs (a job runner, an instance) or holds (a lane)
    endpoint: str = ""  # the endpoint a router or instance serves

    def same_process(self) -> bool:
        stat = _stat(self.pid)
        return stat is not None and stat.start_time == self.start_time and stat.state not in ("Z", "X")


def _stat(pid: int) -> ProcStat | None:
    """The kernel's view of `pid`; None when it is gone, also when it vanishes while being read."""
    try:
        return read_proc_stat(pid)
    except (ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


def _target(
    kind: str, pid: int, jobs: tuple[str, ...] = (), endpoint: str = "", start: int | None = None
) -> Target | None:
    """The process `pid` names, if it runs and (where its record keeps a start time) is still the one recorded:
    a pid the kernel handed to another process is not that kind's to fault."""
    stat = _stat(pid)
    if stat is None or stat.state in ("Z", "X") or (start is not None and stat.start_time != start):
        return None
    return Target(kind, pid, stat.start_time, jobs, endpoint)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _lock_holders(path: Path) -> set[int]:
    """The pids holding a flock on `path`, from the kernel's lock table (/proc/locks)."""
    try:
        inode = path.stat().st_ino
        table = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return set()
    holders = set()
    for line in table:
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            holders.add(int(fields[4]))
    return holders


def forkservers(home: Path) -> list[int]:
    """The server holding the home's fork server lock, if its cmdline says it is one (a forked job keeps the
    template's cmdline, so the cmdline alone cannot tell a server from an orphaned job)."""
    run_dir = str(home / "run")
    found = []
    for pid in sorted(_lock_holders(home / "run" / LOCK_NAME)):
        cmdline = _cmdline(pid)
        if len(cmdline) > 3 and cmdline[1].endswith("forkserver.py") and cmdline[2:4] == ["serve", run_dir]:
            found.append(pid)
    return found


@dataclass
class _Rows:
    jobs: list[tuple[str, str]]  # (job_id, hosts) of RUNNING jobs outside lanes
    lanes: list[tuple[str, str, list[str]]]  # (lane_id, hosts, job ids) of open lanes
    routers: list[tuple[str, str]]  # (endpoint, router JSON)
    instances: list[tuple[str, str, int | None]]  # (endpoint, instance job id, pid once it listens)


def _store_rows(home: Path) -> _Rows:
    """What the store records of the processes it runs, read-only."""
    path = home / "state.db"
    if not path.exists():
        return _Rows([], [], [], [])
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
    try:
        jobs = conn.execute(
            "SELECT job_id, hosts FROM jobs WHERE status = 'RUNNING' AND hosts IS NOT NULL AND lane IS NULL"
        ).fetchall()
        lanes = conn.execute("SELECT lane_id, hosts FROM lanes WHERE ended_at IS NULL AND hosts IS NOT NULL").fetchall()
        held = conn.execute("SELECT lane, job_id FROM jobs WHERE lane IS NOT NULL").fetchall()
        routers = conn.execute("SELECT name, router FROM endpoint_serving WHERE router IS NOT NULL").fetchall()
        instances = conn.execute("SELECT endpoint, instance, pid FROM serving_instances").fetchall()
    except sqlite3.OperationalError:  # the schema is still being created
        return _Rows([], [], [], [])
    finally:
        conn.close()
    by_lane: dict[str, list[str]] = {}
    for lane, job_id in held:
        by_lane.setdefault(lane, []).append(job_id)
    lanes_held = [(lane_id, hosts, by_lane.get(lane_id, [])) for lane_id, hosts in lanes]
    return _Rows(jobs, lanes_held, routers, instances)


def discover(home: Path, clients: list[int]) -> dict[str, list[Target]]:
    """The live processes of each kind right now."""
    found: dict[str, list[Target]] = {kind: [] for kind in KINDS}

    def add(kind: str, pid: int, jobs: tuple[str, ...] = (), endpoint: str = "", start: int | None = None) -> None:
        target = _target(kind, pid, jobs, endpoint, start)
        if target is not None:
            found[kind].append(target)

    for pid in forkservers(home):
        add("forkserver", pid)
    holder = supervisor.running(home)
    if holder:
        add("supervisor", holder)
    with contextlib.suppress(sqlite3.Error):
        rows = _store_rows(home)
        serving = {instance for _, instance, _ in rows.instances}
        for job_id, hosts in rows.jobs:
            for host in json.loads(hosts) if job_id not in serving else ():
                add("job", host["pid"], (job_id,), start=host.get("start_time"))
        for _lane_id, hosts, held in rows.lanes:
            for host in json.loads(hosts):
                add("lane", host["pid"], tuple(held), start=host.get("start_time"))
        for endpoint, router in rows.routers:
            record = json.loads(router)
            add("router", record["pid"], (), endpoint, record.get("start"))
        for endpoint, instance, pid in rows.instances:
            if pid is not None:
                add("instance", pid, (instance,), endpoint)
    for pid in clients:
        add("client", pid)
    return found


def ours(home: Path) -> list[int]:
    """Every live process whose environment names this home (what must be gone after the test)."""
    marker = f"KINETIC_HOME={home}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        stat = _stat(int(entry))
        if marker in environ and stat is not None and stat.state not in ("Z", "X"):
            found.append(int(entry))
    return found
