"""The client side of the warm fork server: ask it to fork job hosts, start it when none runs, stop it.

The server and the cold-path reaper are forkserver.py, which runs as a script and so imports only the
stdlib; this module starts that file by path (`serve`, or `reap` for the cold path) and talks to the server
over its Unix socket with forkserver.py's one-line JSON messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from kinetic_tui.core.backends.local import forkserver
from kinetic_tui.core.backends.local.forkserver import SOCKET_NAME, pid_alive, recv_json, send_json, startup_env

START_TIMEOUT = 30.0
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes including the NUL
LOG_NAME = "forkserver.log"
_SCRIPT = str(Path(forkserver.__file__).resolve())


class Spawned(NamedTuple):
    """What a spawn started: (pid, start_time) per host in order, and the process that reaps them; from the
    warm server, also the connection it closes once it has reaped them all (exit_watch.py)."""

    hosts: list[tuple[int, int | None]]
    reaper: tuple[int, int | None]
    exits: socket.socket | None = None


def _spawned(reply: dict[str, Any], exits: socket.socket | None = None) -> Spawned:
    reaper_pid, reaper_start = reply["reaper"]
    return Spawned([(pid, start) for pid, start in reply["hosts"]], (reaper_pid, reaper_start), exits)


class ForkServerUnavailable(RuntimeError):
    """The server could not be started or reached, and nothing was spawned: the cold path is safe."""


class SpawnError(RuntimeError):
    """Starting a job failed; if the server dropped the request after receiving it, the job may run (its
    launch records tell: see launch_files.py)."""


class ServerLost(SpawnError):
    """The server ended (killed, crashed) after receiving the request and before answering it: nothing of
    ours was at fault but that helper, and the next spawn starts a new one."""


def _taken(reply: dict[str, Any]) -> SpawnError:
    ((role, (pid, _)),) = reply["taken"].items()
    how = "given up" if role == "abandoned" else "started"
    return SpawnError(f"this launch was already {how} by pid {pid}; this request started nothing")


def spawn(
    run_dir: Path, runner: str, hosts: list[dict[str, Any]], server_env: dict[str, str], idle: float, token: str
) -> Spawned:
    """Have the warm server fork one process per host spec for the launch `token`; start the server if none
    runs.

    A server whose interpreter, runner file or start-up environment differ from ours retires and a new one
    starts.
    """
    identity = {"python": sys.executable, "runner": runner, "startup_env": startup_env(server_env)}
    request = {"op": "spawn", "identity": identity, "hosts": hosts, "token": token}
    deadline = time.monotonic() + START_TIMEOUT
    for _ in range(3):
        sock = _connect_or_start(run_dir, identity, server_env, idle, deadline)
        with contextlib.ExitStack() as closing:
            closing.callback(sock.close)
            sock.settimeout(START_TIMEOUT)
            try:
                send_json(sock, request)
            except OSError as exc:  # the server never got the request
                raise ForkServerUnavailable(f"fork server at {run_dir} refused the request: {exc}") from exc
            try:
                reply = recv_json(sock)
            except (EOFError, ConnectionResetError) as exc:
                raise ServerLost(f"fork server at {run_dir} ended before answering the spawn request") from exc
            except (OSError, ValueError) as exc:
                raise SpawnError(f"fork server at {run_dir} did not answer the spawn request: {exc}") from exc
            if "error" in reply:
                raise ForkServerUnavailable(f"fork server could not spawn: {reply['error']}")
            if "taken" in reply:
                raise _taken(reply)
            if "hosts" in reply:
                closing.pop_all()  # kept: the server closes it once the hosts are reaped
                return _spawned(reply, sock)
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
    return int(reply["pid"])


def _ask(run_dir: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    try:
        sock = _connect(run_dir / SOCKET_NAME)
    except ForkServerUnavailable:
        return None
    if sock is None:
        return None
    with sock:
        sock.settimeout(forkserver.REQUEST_TIMEOUT)
        try:
            send_json(sock, request)
            return recv_json(sock)
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


def _start_server(run_dir: Path, identity: dict[str, Any], env: dict[str, str], idle: float, deadline: float) -> str:
    """Start a detached server and return its verdict: "ready", "busy" or an error text."""
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    read_fd, write_fd = os.pipe()
    try:
        with open(run_dir / LOG_NAME, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, _SCRIPT, "serve", str(run_dir), json.dumps(identity), str(idle), str(write_fd)],
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=env,
                start_new_session=True,
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


def spawn_cold(runner: str, hosts: list[dict[str, Any]], token: str) -> Spawned:
    """Start each host as `python runner argv` under a detached reaper that writes the exit files."""
    proc = subprocess.Popen(
        [sys.executable, "-I", _SCRIPT, "reap"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        start_new_session=True,
    )
    out, err = proc.communicate(json.dumps({"runner": runner, "hosts": hosts, "token": token}).encode())
    try:
        reply = json.loads(out)
    except ValueError:
        raise SpawnError(f"the reaper failed: {err.decode().strip() or 'no reply'}") from None
    if "error" in reply:
        raise SpawnError(f"could not start the job: {reply['error']}")
    if "taken" in reply:
        raise _taken(reply)
    return _spawned(reply)
