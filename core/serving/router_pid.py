"""Which process is an endpoint's router. Routers are processes of this machine whatever the backend (the
supervisor starts them), so they are judged by the local kernel's process table."""

from __future__ import annotations

import os
from typing import Any, TypeGuard

from kinetic_tui.core.backends.local.launch_files import pid_alive as process_alive
from kinetic_tui.core.backends.local.launch_files import proc_start_time


def pid_alive(pid: int | None) -> bool:
    """Whether a router process runs; one this process started and that exited is reaped here, so it is
    not left a zombie."""
    if not pid:
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    return process_alive(pid)


def router_record(pid: int, port: int) -> dict[str, Any]:
    """What the store keeps of a router: its pid with the kernel's start time of that process, so that a
    pid the kernel hands to another process once the router is gone is never taken for it, nor signalled."""
    return {"pid": pid, "start": proc_start_time(pid), "port": port}


def router_running(router: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether the recorded router runs (a record kept before start times were, by its pid alone)."""
    if router is None or not pid_alive(router.get("pid")):
        return False
    start = router.get("start")
    return start is None or proc_start_time(router["pid"]) == start
