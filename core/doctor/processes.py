"""The processes that run work of one home, found in /proc (Linux; elsewhere none are found).

A process is ours when it works in one of the home's job or lane directories (its cwd, or a path its argv
names, lies under `local/jobs/` or `local/lanes/`), or when its environment names this home and a job
(`KINETIC_JOB_ID`, set for every job process started cold). A job forked from the fork server shows the
server's command line and environment (the first job's), so for those only the cwd names the job. Clients,
consoles, the fork server and the supervisor match none of these: they are not work and never orphans.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.local.forkserver import read_proc_stat
from kinetic_tui.core.backends.local.launcher import HostProcess

PROC = Path("/proc")
FORKSERVER_SCRIPT = "forkserver.py"


@dataclass(frozen=True)
class WorkProcess:
    """A live process of the home's work: the job or lane directory it belongs to, and its host index."""

    pid: int
    pgid: int
    start_time: int
    owner: str  # a job id (job-…) or a lane id
    lane: bool
    host: int

    def as_host(self) -> HostProcess:
        return HostProcess(self.host, self.pid, self.pgid, self.start_time)


def work_processes(home: Path) -> list[WorkProcess]:
    if not PROC.is_dir():
        return []
    local = home.resolve() / "local"
    found = []
    me = os.getpid()
    for entry in os.listdir(PROC):
        if not entry.isdigit() or int(entry) == me:
            continue
        process = _ours(int(entry), local)
        if process is not None:
            found.append(process)
    return found


def _ours(pid: int, local: Path) -> WorkProcess | None:
    stat = read_proc_stat(pid)
    if stat is None or stat.state in ("Z", "X"):
        return None
    where = _work_dir(pid, local)
    if where is None:
        return None
    owner, lane, host = where
    return WorkProcess(pid, stat.pgrp, stat.start_time, owner, lane, host)


def _work_dir(pid: int, local: Path) -> tuple[str, bool, int] | None:
    """(owner id, is a lane, host) from the process's cwd, argv or environment, or None when not ours."""
    paths = []
    with contextlib.suppress(OSError):  # gone, or not ours to read
        paths.append(os.readlink(PROC / str(pid) / "cwd"))
    argv = _nul_separated(pid, "cmdline")
    for text in paths + argv:
        placed = _placed(Path(text), local)
        if placed is not None:
            return placed
    if len(argv) > 2 and argv[1].endswith(FORKSERVER_SCRIPT) and argv[2] == "serve":
        return None  # the fork server, or a job forked from it: its environment is the first job's
    env = dict(item.partition("=")[::2] for item in _nul_separated(pid, "environ"))
    job_id, home = env.get("KINETIC_JOB_ID"), env.get("KINETIC_HOME")
    if job_id and home and Path(home).resolve() / "local" == local:
        return job_id, False, int(env.get("TPU_WORKER_ID") or 0)
    return None


def _placed(path: Path, local: Path) -> tuple[str, bool, int] | None:
    """`local/jobs/J/work/host-3/...` -> (J, False, 3); `local/lanes/L/...` -> (L, True, 0)."""
    if not path.is_absolute() or not path.is_relative_to(local):
        return None
    parts = path.relative_to(local).parts
    if len(parts) < 2 or parts[0] not in ("jobs", "lanes"):
        return None
    host = 0
    if len(parts) >= 4 and parts[2] == "work" and parts[3].startswith("host-") and parts[3][5:].isdigit():
        host = int(parts[3][5:])
    return parts[1], parts[0] == "lanes", host


def _nul_separated(pid: int, name: str) -> list[str]:
    try:
        data = (PROC / str(pid) / name).read_bytes()
    except OSError:
        return []
    return [item.decode(errors="replace") for item in data.split(b"\0") if item]
