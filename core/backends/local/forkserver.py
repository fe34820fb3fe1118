"""Warm fork server and detached reaper that start local job processes.

Why a server: a cold `python remote_runner.py` pays ~40 ms importing cloudpickle for every job, while a
template process that imported the runner once can fork a copy in ~1 ms. Every job is a fresh fork of that
untouched template, so whatever one job mutates (modules, globals, os.environ, cwd) dies with it.

Why stdlib only: this file runs as a script (`serve`, `reap`) and must start without importing our
packages (the reaper runs under `python -I`, which puts no project path on sys.path). What the script
shares with its client (forkserver_client.py) is defined here: the socket name, the JSON messages and
the /proc helpers.

For host i of a job the parent of the job process (the server, or the reaper on the cold path) writes
`{job_dir}/exit-{i}` atomically once it reaps the host: the exit code, negative N = killed by signal N.
It writes the file in the same loop iteration that reaped the host. Until then an exited host stays a
zombie whose status /proc still shows (`ProcStat.exit_status`), so a stopped or busy parent hides
nothing. If the parent itself is killed, its running jobs go on but their exit files are never written:
each spawn reply names the parent (`reaper`: pid and start time) so readers can tell that it is gone.

Both modes run under umask 0o077 whoever started them: everything they and the jobs they start write
(logs, exit files, results, and the files a job's own code creates) is owner-only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

SOCKET_NAME = "forkserver.sock"
LOCK_NAME = "forkserver.lock"  # held by the server that owns the socket path, for as long as it owns it
DEFAULT_IDLE_SECONDS = 600.0  # a server with no jobs and no requests for 10 minutes exits
REQUEST_TIMEOUT = 5.0
MAX_MESSAGE = 64 << 20
# Read by the interpreter or the dynamic linker at start-up only: a forked job cannot change them
# later, so a server started under different values must not serve the job.
STARTUP_ENV_PREFIXES = ("PYTHON", "LD_", "DYLD_", "LC_", "LANG")
RUNNER_MODULE = "_kinetic_remote_runner"
# What the runner imports at the top or lazily on every run (argparse alone is ~4 ms per cold import).
WARM_MODULES = ("argparse", "hashlib", "json", "shutil", "tempfile", "zipfile", "cloudpickle")
HAVE_PROC = os.path.isdir("/proc/self")


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


def this_process() -> list[int | None]:
    """[pid, start time] of the calling process: how a spawn reply names the reaper of its hosts."""
    return [os.getpid(), proc_start_time(os.getpid())]


def write_exit(job_dir: str, host: int, code: int) -> None:
    """Publish a host's exit code so any process can learn the outcome; readers never see half a file."""
    final = os.path.join(job_dir, f"exit-{host}")
    tmp = f"{final}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, final)


def host_exited(spec: dict[str, Any], pid: int, status: int) -> None:
    """Record a reaped host's exit code; a reaper must keep going whatever happens to one job."""
    try:
        write_exit(spec["job_dir"], spec["host"], os.waitstatus_to_exitcode(status))
    except OSError as exc:  # the job directory was removed under us
        print(f"cannot record the exit of pid {pid}: {exc}", file=sys.stderr, flush=True)


def _popen_detached(argv: list[str], spec: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start argv in its own session with the spec's env and cwd, output appended to its log."""
    with open(spec["log"], "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_ENV_PREFIXES)}


def _daemonize() -> None:
    """Second half of the double fork: the launching client reaps our parent, init adopts us."""
    if os.fork():
        os._exit(0)


def send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def recv_json(sock: socket.socket) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError("connection closed before a full message")
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            message: dict[str, Any] = json.loads(b"".join(chunks))  # both ends send JSON objects only
            return message
        if size > MAX_MESSAGE:
            raise ValueError(f"message longer than {MAX_MESSAGE} bytes")


# ---------------------------------------------------------------------------------------- the reaper


def _reap_main() -> None:
    """Cold path: spawn every host, report (pid, start_time) on stdout, then wait and write exit files."""
    request = json.loads(sys.stdin.buffer.read())
    _daemonize()
    children: dict[int, dict[str, Any]] = {}
    # Keep every Popen referenced: a collected one joins subprocess's cleanup list, and the next Popen
    # call would reap it behind the back of our os.wait(), losing that host's exit code.
    procs = []
    try:
        for spec in request["hosts"]:
            procs.append(_popen_detached([sys.executable, request["runner"], *spec["argv"]], spec))
            children[procs[-1].pid] = spec
    except OSError as exc:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        print(json.dumps({"error": str(exc)}), flush=True)
        return
    hosts = [[pid, proc_start_time(pid)] for pid in children]
    print(json.dumps({"hosts": hosts, "reaper": this_process()}), flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # let the client's read see EOF while we keep waiting
    os.dup2(devnull, 2)
    while children:
        pid, status = os.wait()
        spec = children.pop(pid, None)
        if spec is not None:
            host_exited(spec, pid, status)


# ---------------------------------------------------------------------------------------- the server


def _serve_main(run_dir: Path, identity: dict[str, Any], idle: float, ready_fd: int) -> None:
    _daemonize()
    with os.fdopen(ready_fd, "w") as ready:
        lock_fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ready.write("busy\n")
            return
        try:
            server = _Server(run_dir, identity, idle, lock_fd)
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}".replace("\n", " ")
            ready.write(f"error {message}\n")
            raise
        ready.write(f"ready {os.getpid()}\n")
    server.loop()


class _Server:
    """Single-threaded on purpose: forking from a process with threads is unsafe."""

    def __init__(self, run_dir: Path, identity: dict[str, Any], idle: float, lock_fd: int) -> None:
        self.socket_path = run_dir / SOCKET_NAME
        # The starter's view, not os.environ: the interpreter may have coerced LC_CTYPE at start-up.
        self.identity = identity
        self.runner = identity["runner"]
        self.idle = idle
        self.lock_fd = lock_fd
        self.reaper = this_process()
        self.sources = self._source_stamps()
        self.children: dict[int, dict[str, Any]] = {}
        self.conns: list[socket.socket] = []  # open client connections, which a job must not inherit
        self.retiring = False
        self.last_activity = time.monotonic()
        self.main = self._warm_up()  # before binding, so a runner that fails to import leaves no socket
        self.socket_path.unlink(missing_ok=True)  # we hold the lock, so whoever made this file is dead
        self.listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.socket_path))
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        self.sigchld_default = signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def _warm_up(self) -> Any:
        """Import what every job needs once, so forked children start warm."""
        import gc
        import importlib.util

        for name in WARM_MODULES:
            importlib.import_module(name)
        if not sys.flags.safe_path:
            sys.path[0] = os.path.dirname(self.runner)  # what a cold `python runner.py` starts with
        spec = importlib.util.spec_from_file_location(RUNNER_MODULE, self.runner)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the runner from {self.runner}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[RUNNER_MODULE] = module
        spec.loader.exec_module(module)
        # A cold runner is __main__, whose classes cloudpickle ships by value; keep results loadable by
        # clients that cannot import our private module name.
        sys.modules["cloudpickle"].register_pickle_by_value(module)
        gc.freeze()  # keep the template's objects out of the children's collections: fewer copied pages
        return module.main

    def _source_stamps(self) -> list[tuple[int, int, int]]:
        stamps = []
        for path in (self.runner, __file__):
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return stamps

    def loop(self) -> None:
        while self.listener is not None or self.children:
            fds = [self.wake_r] + ([self.listener] if self.listener is not None else [])
            timeout = None
            if self.listener is not None and not self.children:
                timeout = max(0.0, self.last_activity + self.idle - time.monotonic())
            readable, _, _ = select.select(fds, [], [], timeout)
            if self.wake_r in readable:
                os.read(self.wake_r, 4096)
                self._reap()
            if self.listener is not None and self.listener in readable:
                self._serve_one(self.listener)
            elif not readable and not self.children and time.monotonic() - self.last_activity >= self.idle:
                self._retire()

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.last_activity = time.monotonic()
            spec = self.children.pop(pid, None)
            if spec is not None:
                host_exited(spec, pid, status)

    def _serve_one(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:  # the client gave up before we got to it
            return
        with conn:
            conn.settimeout(REQUEST_TIMEOUT)
            try:
                request = recv_json(conn)
            except (OSError, EOFError, ValueError):
                return
            self.conns.append(conn)
            try:
                reply = self._handle(request)
            except Exception as exc:  # a bad request must not take the server down
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                self.conns.remove(conn)
            with contextlib.suppress(OSError):  # the client hung up: nobody is left to tell
                send_json(conn, reply)
        self.last_activity = time.monotonic()

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return {"pid": os.getpid(), "children": sorted(self.children), "runner": self.runner}
        if op == "shutdown":
            self._retire()
            return {"pid": os.getpid()}
        if op != "spawn":
            return {"error": f"unknown op {op!r}; valid: spawn, status, shutdown"}
        if request["identity"] != self.identity or self._source_stamps() != self.sources:
            self._retire()
            return {"retired": True}
        started: list[tuple[int, int | None]] = []
        try:
            for spec in request["hosts"]:
                started.append(self._fork(spec))
        except OSError as exc:
            for pid, _ in started:
                self.children.pop(pid, None)
                os.kill(pid, signal.SIGKILL)
            return {"error": f"fork failed: {exc}"}
        return {"hosts": started, "reaper": self.reaper}

    def _retire(self) -> None:
        """Give up the socket path, serve whoever already queued on it, keep reaping our jobs."""
        if self.retiring or self.listener is None:
            return
        self.retiring = True
        self.socket_path.unlink(missing_ok=True)
        listener = self.listener
        listener.setblocking(False)
        while select.select([listener], [], [], 0)[0]:
            self._serve_one(listener)
        listener.close()
        self.listener = None
        os.close(self.lock_fd)  # only now may a new server take the path

    def _fork(self, spec: dict[str, Any]) -> tuple[int, int | None]:
        sync_r, sync_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(sync_r)
            self._become_job(spec, sync_w)
        os.close(sync_w)
        try:
            os.read(sync_r, 1)  # returns once the child leads its own group, so killpg(pid) reaches it
        finally:
            os.close(sync_r)
        self.children[pid] = spec
        return pid, proc_start_time(pid)  # not reaped yet, so /proc still has it even if it exited

    def _become_job(self, spec: dict[str, Any], sync_fd: int) -> None:
        code = 1
        try:
            os.setsid()
            os.write(sync_fd, b"x")
            os.close(sync_fd)
            self._drop_server_state()
            log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            os.chdir(spec["cwd"])
            os.environ.clear()
            os.environ.update(spec["env"])
            time.tzset()
            sys.argv = [self.runner, *spec["argv"]]
            code = _run_like_interpreter(self.main, list(spec["argv"]))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def _drop_server_state(self) -> None:
        """A job must not hold the server's fds: an inherited lock fd would keep the lock after we die."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, self.sigchld_default)
        for sock in [self.listener, *self.conns]:
            if sock is not None:
                os.close(sock.detach())
        for fd in (self.wake_r, self.wake_w, self.lock_fd):
            with contextlib.suppress(OSError):  # the lock fd is already closed once the server retired
                os.close(fd)


def _run_like_interpreter(main: Any, argv: list[str]) -> int:
    """Call main(argv) and end the way `python runner.py` would: exit code, threads, atexit, flush."""
    import atexit
    import threading

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as interpreter exit does
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    return code


if __name__ == "__main__":
    os.umask(os.umask(0o077) | 0o077)
    if sys.argv[1:2] == ["serve"]:
        _serve_main(Path(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1:2] == ["reap"]:
        _reap_main()
    else:
        sys.exit(f"usage: {sys.argv[0]} serve RUN_DIR IDENTITY_JSON IDLE READY_FD | reap")
