"""The files a local launch leaves, and the /proc view of a process: stdlib only, shared by the fork server
script (which loads this file by path) and its clients.

A launch leaves records on disk so that any process can finish what a dead one began, and nothing runs
unrecorded. The process that claims a job writes `claim.json` in the job's directory (its pid, start time
and a fresh token). The spawner (the fork server or the cold path's reaper) takes `spawn-{token}.json`
before forking; a client that gave up, or a reader that found the claimer dead, takes it as abandoned
instead. The file is linked into place whole and link never replaces, so exactly one of them wins: a spawn
request that arrives after its client gave up forks nothing. A forked host waits until its parent has
written `started-{token}-{i}.json` (what the store keeps of it) and exits without running if the parent
dies first, so every host that runs has a record. Such a host leaves `unrun-{i}.json` ([pid, start time]):
its parent may have died after writing its record, and a host that never ran must be launched again, not
judged by its exit (its inputs or result were never touched).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

HAVE_PROC = os.path.isdir("/proc/self")
CLAIM_NAME = "claim.json"
TOKEN = re.compile(r"[0-9a-f]{16}")


class ProcStat(NamedTuple):
    state: str
    pgrp: int
    start_time: int  # clock ticks after boot: with the pid, it names one process for good
    exit_status: int | None  # a zombie's wait status, as waitpid would return it (None before Linux 3.5)


def read_proc_stat(pid: int) -> ProcStat | None:
    """Return the kernel's view of `pid` (Linux /proc), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the command name may hold spaces and parens
    exit_status = int(fields[49]) if len(fields) > 49 else None  # field 52 of proc(5), counted from 1
    return ProcStat(fields[0].decode(), int(fields[2]), int(fields[19]), exit_status)


def pid_alive(pid: int) -> bool:
    """True if `pid` runs; a zombie counts as gone (in some containers init never reaps orphans)."""
    if HAVE_PROC:
        stat = read_proc_stat(pid)
        return stat is not None and stat.state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def proc_start_time(pid: int) -> int | None:
    stat = read_proc_stat(pid)
    return stat.start_time if stat else None


_this: list[int | None] = []


def this_process() -> list[int | None]:
    """[pid, start time] of the calling process: how a spawn reply names the reaper of its hosts. Read
    from /proc once per process (a forked child has a pid of its own, so it reads its own)."""
    global _this
    if not _this or _this[0] != os.getpid():
        _this = [os.getpid(), proc_start_time(os.getpid())]
    return list(_this)


def write_atomic(final: str, text: str) -> None:
    """Readers never see half a file."""
    tmp = f"{final}.{os.getpid()}.tmp"
    _write(tmp, text)
    os.replace(tmp, final)


def _write(path: str, text: str) -> None:
    """A small file in one system call each to open, write and close: launch records sit on every job's
    start, where a buffered text file's set-up calls (fstat, isatty, seeks) would add up."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def process_alive(ident: list[int | None] | None) -> bool:
    """True while the process named by [pid, start time] runs or is stopped (it will go on once continued)."""
    if not ident or ident[0] is None:
        return False
    if not HAVE_PROC:
        return pid_alive(ident[0])
    stat = read_proc_stat(ident[0])
    return stat is not None and stat.state not in ("Z", "X") and (ident[1] is None or stat.start_time == ident[1])


def read_json(path: str) -> Any:
    """The file's JSON value, or None if it does not exist."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def spawn_path(job_dir: str, token: str) -> str:
    if not TOKEN.fullmatch(token):
        raise ValueError(f"bad launch token {token!r}")
    return os.path.join(job_dir, f"spawn-{token}.json")


def started_path(job_dir: str, token: str, host: int) -> str:
    return os.path.join(job_dir, f"started-{token}-{int(host)}.json")


def unrun_path(job_dir: str, host: int) -> str:
    return os.path.join(job_dir, f"unrun-{int(host)}.json")


def take_spawn(job_dir: str, token: str, role: str) -> tuple[bool, dict[str, Any]]:
    """Take the launch of claim `token` as "spawner" or "abandoned" unless someone already has: (won, the
    owner's record). Exactly one process ever wins."""
    final = spawn_path(job_dir, token)
    record = {role: this_process()}
    tmp = f"{final}.{os.getpid()}.tmp"
    _write(tmp, json.dumps(record))
    try:
        os.link(tmp, final)
    except FileExistsError:
        owner: dict[str, Any] = read_json(final)
        return False, owner
    finally:
        os.unlink(tmp)
    return True, record


def undo_spawn(job_dir: str, token: str, hosts: list[dict[str, Any]]) -> None:
    """Give a launch back after its forks failed (their hosts killed), so another spawner may take it."""
    for spec in hosts:
        with contextlib.suppress(OSError):
            os.unlink(started_path(job_dir, token, spec["host"]))
    with contextlib.suppress(OSError):
        os.unlink(spawn_path(job_dir, token))


class Spare(NamedTuple):
    """A forked process that leads its own session and waits for the spec of the host it is to become."""

    pid: int
    start_time: int | None
    spec_w: int  # where its spec, then the go-ahead, are written


def fork_spare(become: Callable[[dict[str, Any]], int], prepare: Callable[[], None] | None = None) -> Spare:
    """Fork a process in its own session (after `prepare`, which drops what it must not inherit) that waits
    for its spec and then for the go-ahead (`assign`), and then runs `become(spec)` (its exit code).

    Its own session, not only its own group in the starter's session: that group would be orphaned when
    the starter dies, and the kernel hangs up an orphaned group that has a stopped member. This waits until
    the child leads its session, so `killpg(pid)` reaches it once it is recorded. A fork server keeps one
    spare forked ahead of the next spawn, which then costs neither the fork nor this wait.

    If its parent dies before the go-ahead, the child exits without running; once it knows its spec it
    first leaves `unrun-{i}.json`, since its parent may have recorded it. OSError: nothing was forked."""
    sync_r, sync_w = os.pipe()
    spec_r, spec_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(sync_r)
            os.close(spec_w)
            if prepare is not None:
                prepare()
            os.setsid()
            os.write(sync_w, b"x")
            os.close(sync_w)
            spec, go = _read_assignment(spec_r)
            os.close(spec_r)
            if spec is not None and go:
                code = become(spec)
            elif spec is not None:  # the parent died before letting us run, perhaps after recording us
                write_atomic(unrun_path(spec["job_dir"], spec["host"]), json.dumps(this_process()))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(sync_w)
    os.close(spec_r)
    try:
        os.read(sync_r, 1)  # returns once the child leads its own session, so killpg(pid) reaches it
        return Spare(pid, proc_start_time(pid), spec_w)  # not reaped yet, so /proc still has it
    except BaseException:
        os.close(spec_w)  # the child sees the pipe close and exits unrun
        raise
    finally:
        os.close(sync_r)


def _read_assignment(fd: int) -> tuple[dict[str, Any] | None, bool]:
    """(the spec, whether the go-ahead followed it) from a spare's pipe, read until its writer closes it
    (`assign` always does, and so does the kernel when the writer dies); (None, False) without a spec."""
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    line, newline, rest = data.partition(b"\n")
    if not newline:
        return None, False
    return json.loads(line), rest[:1] == b"x"


def assign(spare: Spare, spec: dict[str, Any], token: str, reaper: list[int | None]) -> tuple[int, int | None]:
    """Make the spare host `spec` of the launch `token`: hand it its spec, record it, then let it run.
    OSError (nothing recorded) when the spare is gone."""
    try:
        data = json.dumps(spec).encode() + b"\n"
        while data:  # a spec bigger than the pipe's buffer: the spare reads while we write
            data = data[os.write(spare.spec_w, data) :]
        record = {"host": spec["host"], "pid": spare.pid, "pgid": spare.pid, "start_time": spare.start_time}
        record.update(reaper=reaper[0], reaper_start=reaper[1])
        write_atomic(started_path(spec["job_dir"], token, spec["host"]), json.dumps(record))
        os.write(spare.spec_w, b"x")
    finally:  # without the go-ahead, the closed pipe makes the spare exit unrun
        os.close(spare.spec_w)
    return spare.pid, spare.start_time


def fork_host(
    spec: dict[str, Any],
    token: str,
    reaper: list[int | None],
    become: Callable[[dict[str, Any]], int],
    prepare: Callable[[], None] | None = None,
) -> tuple[int, int | None]:
    """Fork one host in its own session, record it, then let it run `become(spec)` (see `fork_spare`)."""
    return assign(fork_spare(become, prepare), spec, token, reaper)
