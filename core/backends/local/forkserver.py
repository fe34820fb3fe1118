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

The records a launch leaves, which make sure nothing runs unrecorded, are launch_files.py's.

Both modes run under umask 0o077 whoever started them: everything they and the jobs they start write
(logs, exit files, results, and the files a job's own code creates) is owner-only.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

SOCKET_NAME = "forkserver.sock"
LOCK_NAME = "forkserver.lock"  # held by the server that owns the socket path, for as long as it owns it
DEFAULT_IDLE_SECONDS = 600.0  # a server with no jobs and no requests for 10 minutes exits
REQUEST_TIMEOUT = 5.0
MAX_MESSAGE = 64 << 20
MAX_WATCHERS = 512  # spawn connections kept open to signal an exit (each holds one descriptor)
SPARES = 2  # job processes forked ahead, each idle on a pipe until a spawn hands it its spec
# Read by the interpreter or the dynamic linker at start-up only: a forked job cannot change them
# later, so a server started under different values must not serve the job.
STARTUP_ENV_PREFIXES = ("PYTHON", "LD_", "DYLD_", "LC_", "LANG")
RUNNER_MODULE = "_kinetic_remote_runner"
# What the runner imports at the top or lazily on every run (argparse alone is ~4 ms per cold import).
WARM_MODULES = ("argparse", "hashlib", "json", "shutil", "tempfile", "zipfile", "cloudpickle")


def _sibling(name: str) -> ModuleType:
    """A module of this directory, loaded by path under a name no job's own module can have."""
    spec = importlib.util.spec_from_file_location(f"_kinetic_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING or __name__ != "__main__":
    from kinetic_tui.core.backends.local import launch_files
else:  # run as a script, which imports none of our packages
    launch_files = _sibling("launch_files")
HAVE_PROC = launch_files.HAVE_PROC
ProcStat = launch_files.ProcStat
read_proc_stat = launch_files.read_proc_stat
pid_alive = launch_files.pid_alive
proc_start_time = launch_files.proc_start_time
this_process = launch_files.this_process


def write_exit(job_dir: str, host: int, code: int) -> None:
    """Publish a host's exit code so any process can learn the outcome."""
    launch_files.write_atomic(os.path.join(job_dir, f"exit-{host}"), f"{code}\n")


def host_exited(spec: dict[str, Any], pid: int, status: int) -> None:
    """Record a reaped host's exit code; a reaper must keep going whatever happens to one job."""
    try:
        write_exit(spec["job_dir"], spec["host"], os.waitstatus_to_exitcode(status))
    except OSError as exc:  # the job directory was removed under us
        print(f"cannot record the exit of pid {pid}: {exc}", file=sys.stderr, flush=True)


def _exec_runner(runner: str, spec: dict[str, Any]) -> int:
    """Cold path, in the forked host: become `python runner argv` with the spec's env and cwd, output
    appended to its log (every other descriptor of ours is close-on-exec)."""
    log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(spec["cwd"])
    for name in ("SIGPIPE", "SIGXFSZ"):  # ignored by this interpreter; an ignored signal survives exec
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    os.execve(sys.executable, [sys.executable, runner, *spec["argv"]], spec["env"])
    return 127  # not reached: execve returns only by raising


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
    """Cold path: take the launch, fork every host, report them on stdout, then wait and write exit files."""
    request = json.loads(sys.stdin.buffer.read())
    _daemonize()
    hosts, token = request["hosts"], request["token"]
    won, owner = launch_files.take_spawn(hosts[0]["job_dir"], token, "spawner")
    if not won:
        print(json.dumps({"taken": owner}), flush=True)
        return
    children: dict[int, dict[str, Any]] = {}
    started: list[tuple[int, int | None]] = []
    try:
        for spec in hosts:
            started.append(
                launch_files.fork_host(spec, token, this_process(), lambda spec: _exec_runner(request["runner"], spec))
            )
            children[started[-1][0]] = spec
    except OSError as exc:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        launch_files.undo_spawn(hosts[0]["job_dir"], token, hosts)
        print(json.dumps({"error": str(exc)}), flush=True)
        return
    print(json.dumps({"hosts": started, "reaper": this_process()}), flush=True)
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


class _Conn:
    """A client connection the server is reading a request from, without waiting on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.deadline = time.monotonic() + REQUEST_TIMEOUT


class _Server:
    """Single-threaded on purpose: forking from a process with threads is unsafe. It never waits on one
    client: every connection is read without blocking into its own buffer, and dropped after
    REQUEST_TIMEOUT without a whole request, so a slow or stopped client delays nobody's spawn or reaping."""

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
        self.conns: dict[socket.socket, _Conn] = {}  # open client connections, which a job must not inherit
        # Spawn connections kept open until their hosts are reaped, closed to wake the waiting client
        # (exit_watch.py); each host's pid names its spawn's socket and the pids of that spawn still running.
        self.watchers: dict[int, tuple[socket.socket, set[int]]] = {}
        self.spares: list[launch_files.Spare] = []  # the next spawns' hosts, forked ahead (SPARES at most)
        self.last_activity = time.monotonic()
        self.main = self._warm_up()  # before binding, so a runner that fails to import leaves no socket
        self.socket_path.unlink(missing_ok=True)  # we hold the lock, so whoever made this file is dead
        self.listener: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.socket_path))
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.selector.register(self.listener, selectors.EVENT_READ)
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
        warm_up = getattr(module, "warm_up", None)  # ours has one; a launch may name another runner file
        if warm_up is not None:
            warm_up()
        gc.freeze()  # keep the template's objects out of the children's collections: fewer copied pages
        return module.main

    def _source_stamps(self) -> list[tuple[int, int, int]]:
        stamps = []
        for path in (self.runner, __file__, launch_files.__file__):
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return stamps

    def loop(self) -> None:
        while self.listener is not None or self.children or self.conns:
            for key, _ in self.selector.select(self._timeout()):
                if key.fileobj == self.wake_r:
                    os.read(self.wake_r, 4096)
                    self._reap()
                elif key.fileobj is self.listener:
                    self._accept()
                elif isinstance(key.fileobj, socket.socket) and key.fileobj in self.conns:
                    self._receive(self.conns[key.fileobj])
            now = time.monotonic()
            for conn in [c for c in self.conns.values() if c.deadline <= now]:
                self._close(conn)  # no whole request in time: that client gave up or is stuck
            if not self.children and not self.conns and now - self.last_activity >= self.idle:
                self._retire()  # the spares go too

    def _timeout(self) -> float | None:
        deadlines = [conn.deadline for conn in self.conns.values()]
        if self.listener is not None and not self.children:
            deadlines.append(self.last_activity + self.idle)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

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
            sock, running = self.watchers.pop(pid, (None, set()))
            running.discard(pid)
            if sock is not None and not running:
                sock.close()  # after the exit files: the client that wakes finds them
            if spec is not None:
                self._fork_spare()

    def _accept(self) -> None:
        while self.listener is not None:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # nobody else is waiting (or the client gave up before we got to it)
                return
            sock.setblocking(False)
            self.conns[sock] = _Conn(sock)
            self.selector.register(sock, selectors.EVENT_READ)
            self.last_activity = time.monotonic()

    def _receive(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        conn.buffer += chunk
        if not chunk or len(conn.buffer) > MAX_MESSAGE:
            self._close(conn)
            return
        if not chunk.endswith(b"\n"):
            return
        self.selector.unregister(conn.sock)
        try:
            reply = self._handle(json.loads(conn.buffer))
        except Exception as exc:  # a bad request must not take the server down
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        conn.sock.settimeout(REQUEST_TIMEOUT)  # a reply is small: the socket's buffer takes it at once
        try:
            send_json(conn.sock, reply)
        except OSError:  # the client hung up: nobody is left to tell
            reply = {}
        pids = {pid for pid, _ in reply.get("hosts", ())} & self.children.keys()
        if pids and len(self.watchers) < MAX_WATCHERS:
            del self.conns[conn.sock]
            self.watchers.update((pid, (conn.sock, pids)) for pid in pids)
        else:
            self._close(conn, registered=False)
        self.last_activity = time.monotonic()

    def _close(self, conn: _Conn, registered: bool = True) -> None:
        if registered:
            self.selector.unregister(conn.sock)
        del self.conns[conn.sock]
        conn.sock.close()

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            spares = [spare.pid for spare in self.spares]
            return {"pid": os.getpid(), "children": sorted(self.children), "runner": self.runner, "spares": spares}
        if op == "shutdown":
            self._retire()
            return {"pid": os.getpid()}
        if op != "spawn":
            return {"error": f"unknown op {op!r}; valid: spawn, status, shutdown"}
        if request["identity"] != self.identity or self._source_stamps() != self.sources:
            self._retire()
            return {"retired": True}
        hosts, token = request["hosts"], request["token"]
        won, owner = launch_files.take_spawn(hosts[0]["job_dir"], token, "spawner")
        if not won:
            return {"taken": owner}
        started: list[tuple[int, int | None]] = []
        try:
            for spec in hosts:
                started.append(self._start_host(spec, token))
                self.children[started[-1][0]] = spec
        except OSError as exc:
            for pid, _ in started:
                self.children.pop(pid, None)
                os.kill(pid, signal.SIGKILL)
            launch_files.undo_spawn(hosts[0]["job_dir"], token, hosts)
            return {"error": f"fork failed: {exc}"}
        return {"hosts": started, "reaper": self.reaper}

    def _start_host(self, spec: dict[str, Any], token: str) -> tuple[int, int | None]:
        """The oldest spare forked ahead becomes the host (see launch_files.fork_spare); without one, or if
        they are gone, a host is forked now."""
        while self.spares:
            spare = self.spares.pop(0)
            try:
                return launch_files.assign(spare, spec, token, self.reaper)
            except OSError:
                pass  # it died (killed by someone): nothing was recorded for it
        return launch_files.fork_host(spec, token, self.reaper, self._become_job, self._drop_server_state)

    def _fork_spare(self) -> None:
        """Fork a next spawn's host ahead, once a job has ended (not while one starts, whose core it would
        take): the fork and the wait for its session leave the next job's start. Up to SPARES, so a map
        whose lanes start together on a 2-node pool takes both from spares."""
        if len(self.spares) < SPARES and self.listener is not None:
            with contextlib.suppress(OSError):  # out of processes: the next spawn forks as it needs
                self.spares.append(launch_files.fork_spare(self._become_job, self._drop_server_state))

    def _drop_spares(self) -> None:
        spares, self.spares = self.spares, []
        for spare in spares:
            os.close(spare.spec_w)  # it exits without running; reaped like any child

    def _retire(self) -> None:
        """Give up the socket path, serve whoever already queued on it, keep reaping our jobs."""
        self._drop_spares()
        if self.listener is None:
            return
        self.socket_path.unlink(missing_ok=True)
        self._accept()  # the connections already queued are served like the others
        self.selector.unregister(self.listener)
        self.listener.close()
        self.listener = None
        os.close(self.lock_fd)  # only now may a new server take the path

    def _become_job(self, spec: dict[str, Any]) -> int:
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.chdir(spec["cwd"])
        os.environ.clear()
        os.environ.update(spec["env"])
        time.tzset()
        sys.argv = [self.runner, *spec["argv"]]
        return _run_like_interpreter(self.main, list(spec["argv"]))

    def _drop_server_state(self) -> None:
        """A job must not hold the server's fds: an inherited lock fd would keep the lock after we die."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, self.sigchld_default)
        for sock in {self.listener, *self.conns, *(sock for sock, _ in self.watchers.values())}:
            if sock is not None:
                os.close(sock.detach())
        fds = [self.wake_r, self.wake_w, self.lock_fd, self.selector.fileno()]
        fds += [spare.spec_w for spare in self.spares]  # each spare must see its pipe close if the server dies
        for fd in fds:
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
