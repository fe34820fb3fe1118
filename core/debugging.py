"""Debugging a job with debugpy: what the job is told, how a client finds it, and where to attach.

`run(debug=True)` sets `KINETIC_DEBUG=1` in the job's environment (with Kinetic's variable names for the port
and the wait); the runner then starts debugpy, writes where it listens to `debug.json` beside the job's
result, and waits up to `KINETIC_DEBUG_WAIT_TIMEOUT` seconds (600 unless the client's environment says
otherwise) for a debugger before it calls the function, as Kinetic's runner does.

A job on this machine listens on 127.0.0.1 and a free port (jobs debugged at once never collide); a pod
listens on 5678, debugpy's and VS Code's default, and the client reaches it through a port-forward the
backend sets up (`Backend.debug_endpoint`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

from kinetic_tui.core.backends.base import Backend, DebugEndpoint
from kinetic_tui.core.errors import KineticError, NotFoundError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.validation import MAX_SECONDS, require_int, require_number

if TYPE_CHECKING:
    from kinetic_tui.core.storage import Storage

DEBUGPY_PORT = 5678
DEBUG_WAIT_TIMEOUT = 600
READY_FILE = "debug.json"  # beside result.pkl: {"host": ..., "port": ...} once debugpy listens
REMOTE_ROOT = "/tmp/workspace"


class DebugError(KineticError, RuntimeError):
    """The job cannot be debugged: it is not a debug job, it ended first, or no terminal can attach."""


class DebugTimeout(DebugError, TimeoutError):
    """The job's debugger did not start listening in time (the job keeps running)."""


def debug_env(on_this_machine: bool) -> dict[str, str]:
    """The variables that make the runner start debugpy."""
    wait = os.environ.get("KINETIC_DEBUG_WAIT_TIMEOUT") or str(DEBUG_WAIT_TIMEOUT)
    return {
        "KINETIC_DEBUG": "1",
        "KINETIC_DEBUG_HOST": "127.0.0.1" if on_this_machine else "0.0.0.0",
        "KINETIC_DEBUG_PORT": "0" if on_this_machine else str(DEBUGPY_PORT),
        "KINETIC_DEBUG_WAIT_TIMEOUT": wait,
    }


def require_debug_terminal() -> None:
    """A blocking debug call waits for a person to attach: refuse at once when nobody can
    (`KINETIC_NO_TTY_DEBUG=1` allows it, e.g. for a debugger started by a script)."""
    if os.environ.get("KINETIC_NO_TTY_DEBUG") == "1" or sys.stdin.isatty():
        return
    raise DebugError(
        "debug=True needs an interactive terminal (stdin is not a TTY): call f.run_async() and "
        "handle.debug_attach() from one, or set KINETIC_NO_TTY_DEBUG=1"
    )


def ready_address(data: bytes) -> tuple[str, int, str]:
    """The (host, port, code directory) a job's `debug.json` names."""
    where = json.loads(data)
    return str(where["host"]), int(where["port"]), str(where.get("remote_root") or REMOTE_ROOT)


class DebugSession:
    """An attachable job: `address` is what a debugger connects to. Close it (or leave the `with` block) to
    stop the port-forward; `terminate`/`wait`/`kill` are there for code written against Kinetic, whose
    `debug_attach` returns the port-forward process."""

    def __init__(self, job_id: str, endpoint: DebugEndpoint) -> None:
        self.job_id = job_id
        self.host = endpoint.host
        self.port = endpoint.port
        self.forwarded = endpoint.forwarded
        self._endpoint = endpoint
        self._closed = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._endpoint.stop()

    terminate = kill = close

    def wait(self, timeout: float | None = None) -> int:
        self.close()
        return 0

    def poll(self) -> int | None:
        return 0 if self._closed else None

    def __enter__(self) -> DebugSession:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()


def attach_instructions(host: str, port: int, working_dir: str | None = None, remote_root: str = REMOTE_ROOT) -> str:
    """The VS Code launch configuration that attaches to `host:port`."""
    config = {
        "name": "Kinetic Debug",
        "type": "debugpy",
        "request": "attach",
        "connect": {"host": host, "port": port},
        "pathMappings": [{"localRoot": working_dir or "${workspaceFolder}", "remoteRoot": remote_root}],
    }
    body = json.dumps(config, indent=2)
    return (
        f"debugpy is listening on {host}:{port}; the job waits for a debugger before calling the function.\n"
        f"Add this to .vscode/launch.json and start debugging (F5):\n{body}"
    )


class Debuggable(Protocol):
    """What `attach_debugger` needs of a job handle."""

    @property
    def job_id(self) -> str: ...

    @property
    def debug(self) -> bool: ...

    def status(self) -> JobStatus: ...

    def storage(self) -> Storage: ...

    def runs_on(self) -> Backend: ...


def attach_debugger(handle: Debuggable, local_port: int, working_dir: str | None, timeout: float) -> DebugSession:
    """`JobHandle.debug_attach`: wait for the job's `debug.json`, reach its address, print how to attach."""
    if not handle.debug:
        raise DebugError(f"job {handle.job_id} was not submitted with debug=True; it runs no debugger")
    require_int("local_port", local_port, 0, 65535)
    require_number("timeout", timeout, minimum=0, maximum=MAX_SECONDS)
    key = f"{handle.job_id}/{READY_FILE}"
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            data = handle.storage().get_bytes(key)
            break
        except NotFoundError:
            pass
        status = handle.status()
        if status.finished:
            raise DebugError(f"job {handle.job_id} ended ({status.value}) before its debugger started listening")
        if time.monotonic() >= deadline:
            raise DebugTimeout(f"job {handle.job_id}: no debugger listening after {timeout:g} s ({status.value})")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
    host, port, remote_root = ready_address(data)
    endpoint = handle.runs_on().debug_endpoint(handle.job_id, host, port, local_port)
    print(attach_instructions(endpoint.host, endpoint.port, working_dir, remote_root), flush=True)
    return DebugSession(handle.job_id, endpoint)
