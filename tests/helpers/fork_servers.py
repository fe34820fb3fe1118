"""Real fork servers of the test's home with one behaviour changed, started the way the client starts one.

"before-reply" dies after forking a job, before it replies; "on-request" dies as it receives a spawn request,
before forking anything; "mid-slice" dies between forking host 0 and host 1;
"before-go" dies once it has recorded its first host started, before it lets that host run ("before-go-stopped"
stops that host first, so that the test decides when it learns of the death);
"patient" never drops a client that sends only part of a request (REQUEST_TIMEOUT of an hour), so that a test
can hold such a client while the server serves others, and tell "the server served them meanwhile" from "it
waited for the slow client to time out" without a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from kinetic_tui.core.backends.local import forkserver, launcher
from kinetic_tui.core.backends.local.launching import job_env
from kinetic_tui.core.paths import kinetic_home

TIMEOUT = 30.0

CHANGED_SERVER = """
    import importlib.util, json, os, signal, sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("forkserver_under_test", sys.argv[1])
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    handle, fork_host, forks = fs._Server._handle, fs.launch_files.fork_host, []

    def killed_before_replying(self, request):
        reply = handle(self, request)
        if "hosts" in reply:
            os._exit(0)  # the server dies after forking the job, before it replies
        return reply

    def killed_on_the_request(self, request):
        if request.get("op") == "spawn":
            os._exit(0)  # the server dies holding the request, having started nothing
        return handle(self, request)

    def killed_before_the_second_host(*args):
        if forks:
            os._exit(0)  # the server dies between forking host 0 and host 1
        forks.append(1)
        return fork_host(*args)

    write_atomic = fs.launch_files.write_atomic

    def killed_before_the_go_ahead(final, text):
        write_atomic(final, text)
        if os.path.basename(final).startswith("started-"):
            if mode == "before-go-stopped":
                os.kill(json.loads(text)["pid"], signal.SIGSTOP)
            os._exit(0)  # the host is recorded started, and waits for a go-ahead that never comes

    mode = sys.argv[5]
    if mode.startswith("before-go"):
        fs.launch_files.write_atomic = killed_before_the_go_ahead
    elif mode == "patient":
        fs.REQUEST_TIMEOUT = 3600.0
    elif mode == "on-request":
        fs._Server._handle = killed_on_the_request
    else:
        fs._Server._handle = killed_before_replying
    if mode == "mid-slice":
        fs.launch_files.fork_host = killed_before_the_second_host
    fs._serve_main(Path(sys.argv[2]), json.loads(sys.argv[3]), 600.0, int(sys.argv[4]))
"""


def start_server(mode: str) -> int:
    """Start the home's fork server in `mode` (see the module docstring); return its pid."""
    run_dir = kinetic_home() / "run"
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = job_env()
    identity = {
        "python": sys.executable,
        "runner": str(launcher.default_runner_file()),
        "startup_env": forkserver.startup_env(env),
    }
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-c", textwrap.dedent(CHANGED_SERVER), forkserver.__file__, str(run_dir)]
    proc = subprocess.Popen([*argv, json.dumps(identity), str(write_fd), mode], pass_fds=(write_fd,), env=env)
    os.close(write_fd)
    proc.wait(timeout=TIMEOUT)
    with os.fdopen(read_fd) as ready:
        verdict = ready.readline().split()
    assert verdict[0] == "ready", verdict
    return int(verdict[1])
