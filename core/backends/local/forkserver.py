"""Warm fork server and detached reaper that start local job processes.

Why a server: a cold `python remote_runner.py` pays ~40 ms importing cloudpickle for every job, while a
template process that imported the runner once can fork a copy in ~1 ms. Every job is a fresh fork of that
untouched template, so whatever one job mutates (modules, globals, os.environ, cwd) dies with it.

Why stdlib only: this file runs as a script (`serve`, `reap`) and must start without importing `core`.

For host i of a job the parent of the job process (the server, or the reaper on the cold path) writes
`{job_dir}/exit-{i}` atomically once it reaps the host: the exit code, negative N = killed by signal N.
If the server itself is killed, its running jobs go on but their exit files are never written.
"""
from __future__ import annotations

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
LOG_NAME = "forkserver.log"
DEFAULT_IDLE_SECONDS = 600.0  # a server with no jobs and no requests for 10 minutes exits
START_TIMEOUT = 30.0
REQUEST_TIMEOUT = 5.0
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the NUL
MAX_MESSAGE = 64 << 20
# Read by the interpreter or the dynamic linker at start-up only: a forked job cannot change them
# later, so a server started under different values must not serve the job.
STARTUP_ENV_PREFIXES = ("PYTHON", "LD_", "DYLD_", "LC_", "LANG")
RUNNER_MODULE = "_kinetic_remote_runner"
# What the runner imports at the top or lazily on every run (argparse alone is ~4 ms per cold import).
WARM_MODULES = ("argparse", "hashlib", "json", "shutil", "tempfile", "zipfile", "cloudpickle")
HAVE_PROC = os.path.isdir("/proc/self")


class ForkServerUnavailable(RuntimeError):
    """The server could not be started or reached, and nothing was spawned: the cold path is safe."""


class SpawnError(RuntimeError):
    """Starting a job failed; if the server dropped the request after receiving it, the job may run."""


class ProcStat(NamedTuple):
    state: str
    pgrp: int
    start_time: int  # clock ticks after boot: with the pid, it names one process for good


def read_proc_stat(pid: int) -> ProcStat | None:
    """Return the kernel's view of `pid` (Linux /proc), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # the command name may hold spaces and parens
    return ProcStat(fields[0].decode(), int(fields[2]), int(fields[19]))


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
        return subprocess.Popen(argv, cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_ENV_PREFIXES)}


def _daemonize() -> None:
    """Second half of the double fork: the launching client reaps our parent, init adopts us."""
    if os.fork():
        os._exit(0)


def _send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _recv_json(sock: socket.socket) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise EOFError("connection closed before a full message")
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            return json.loads(b"".join(chunks))
        if size > MAX_MESSAGE:
            raise ValueError(f"message longer than {MAX_MESSAGE} bytes")


# ---------------------------------------------------------------------------------------- client side


def spawn(
    run_dir: Path, runner: str, hosts: list[dict[str, Any]], server_env: dict[str, str], idle: float
) -> list[tuple[int, int | None]]:
    """Have the warm server fork one process per host spec; start the server if none runs.

    A server whose interpreter, runner file or start-up environment differ from ours retires and a new one
    starts. Returns (pid, start_time) per host, in order.
    """
    identity = {"python": sys.executable, "runner": runner, "startup_env": startup_env(server_env)}
    request = {"op": "spawn", "identity": identity, "hosts": hosts}
    deadline = time.monotonic() + START_TIMEOUT
    for _ in range(3):
        sock = _connect_or_start(run_dir, identity, server_env, idle, deadline)
        with sock:
            sock.settimeout(START_TIMEOUT)
            try:
                _send_json(sock, request)
            except OSError as exc:  # the server never got the request
                raise ForkServerUnavailable(f"fork server at {run_dir} refused the request: {exc}") from exc
            try:
                reply = _recv_json(sock)
            except (OSError, EOFError, ValueError) as exc:
                raise SpawnError(f"fork server at {run_dir} dropped a spawn request: {exc}") from exc
        if "error" in reply:
            raise ForkServerUnavailable(f"fork server could not spawn: {reply['error']}")
        if "hosts" in reply:
            return [(pid, start) for pid, start in reply["hosts"]]
        # "retired": it served another identity and has stepped aside; start ours
    raise ForkServerUnavailable(f"fork servers in {run_dir} keep retiring: identity {identity} never matches")


def server_status(run_dir: Path) -> dict[str, Any] | None:
    """The running server's {"pid", "children", "runner"}, or None if no server answers."""
    return _ask(run_dir, {"op": "status"})


def shutdown_server(run_dir: Path, timeout: float = 5.0) -> int | None:
    """Make the server stop accepting and exit once its running jobs are reaped (jobs are not killed).

    Waits up to `timeout` seconds for the process to exit; returns its pid, or None if none was running.
    """
    reply = _ask(run_dir, {"op": "shutdown"})
    if reply is None:
        return None
    deadline = time.monotonic() + timeout
    while pid_alive(reply["pid"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return reply["pid"]


def _ask(run_dir: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    try:
        sock = _connect(run_dir / SOCKET_NAME)
    except ForkServerUnavailable:
        return None
    if sock is None:
        return None
    with sock:
        sock.settimeout(REQUEST_TIMEOUT)
        try:
            _send_json(sock, request)
            return _recv_json(sock)
        except (OSError, EOFError, ValueError):
            return None


def _connect(path: Path) -> socket.socket | None:
    """A connected socket, None if no server listens there, ForkServerUnavailable if it cannot work."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ForkServerUnavailable(f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):  # none yet, or a stale file of a dead server
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise ForkServerUnavailable(f"cannot reach the fork server at {path}: {exc}") from exc
    return sock


def _connect_or_start(
    run_dir: Path, identity: dict[str, Any], env: dict[str, str], idle: float, deadline: float
) -> socket.socket:
    while True:
        sock = _connect(run_dir / SOCKET_NAME)
        if sock is not None:
            return sock
        if time.monotonic() > deadline:
            raise ForkServerUnavailable(f"timed out starting the fork server in {run_dir}")
        verdict = _start_server(run_dir, identity, env, idle, deadline)
        if verdict == "busy":  # another server owns the socket but is starting or retiring
            time.sleep(0.005)
        elif verdict != "ready":
            raise ForkServerUnavailable(f"fork server failed to start ({verdict}); see {run_dir / LOG_NAME}")


def _start_server(
    run_dir: Path, identity: dict[str, Any], env: dict[str, str], idle: float, deadline: float
) -> str:
    """Start a detached server and return its verdict: "ready", "busy" or an error text."""
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    try:
        with open(run_dir / LOG_NAME, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "serve", str(run_dir), json.dumps(identity),
                 str(idle), str(write_fd)],
                pass_fds=(write_fd,), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd="/", env=env, start_new_session=True,
            )
        os.close(write_fd)
        write_fd = -1
        proc.wait()  # the intermediate exits as soon as it has forked the server
        with os.fdopen(read_fd, "rb") as verdicts:
            read_fd = -1
            line = verdicts.readline().decode().strip() if _readable(verdicts, deadline) else "timed out"
    finally:
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
    return line.split(" ", 1)[0] if line.startswith(("ready", "busy")) else (line or "exited during start-up")


def _readable(stream: Any, deadline: float) -> bool:
    """Wait until `stream` has data or the deadline passes. poll(), not select(): the client may hold
    more than 1024 descriptors, and select() cannot watch those."""
    poller = select.poll()
    poller.register(stream, select.POLLIN)
    return bool(poller.poll(max(0.0, deadline - time.monotonic()) * 1000))


def spawn_cold(runner: str, hosts: list[dict[str, Any]]) -> list[tuple[int, int | None]]:
    """Start each host as `python runner argv` under a detached reaper that writes the exit files."""
    proc = subprocess.Popen(
        [sys.executable, "-I", str(Path(__file__).resolve()), "reap"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
        start_new_session=True,
    )
    out, err = proc.communicate(json.dumps({"runner": runner, "hosts": hosts}).encode())
    try:
        reply = json.loads(out)
    except ValueError:
        raise SpawnError(f"the reaper failed: {err.decode().strip() or 'no reply'}") from None
    if "error" in reply:
        raise SpawnError(f"could not start the job: {reply['error']}")
    return [(pid, start) for pid, start in reply["hosts"]]


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
    print(json.dumps({"hosts": [[pid, proc_start_time(pid)] for pid in children]}), flush=True)
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
                request = _recv_json(conn)
            except (OSError, EOFError, ValueError):
                return
            self.conns.append(conn)
            try:
                reply = self._handle(request)
            except Exception as exc:  # a bad request must not take the server down
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                self.conns.remove(conn)
            try:
                _send_json(conn, reply)
            except OSError:
                pass
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
        return {"hosts": started}

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
            log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
            try:
                os.close(fd)
            except OSError:  # the lock fd is already closed once the server retired
                pass


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
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve_main(Path(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1:2] == ["reap"]:
        _reap_main()
    else:
        sys.exit(f"usage: {sys.argv[0]} serve RUN_DIR IDENTITY_JSON IDLE READY_FD | reap")
