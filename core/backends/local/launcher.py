"""Start, observe and stop the OS processes of local jobs.

For a job directory J and host i (the same layout whether one host or many, so readers never special-case):
  J/logs/host-{i}.log   stdout and stderr of the host, appended
  J/work/host-{i}/      the host's working directory
  J/exit-{i}            its exit code once reaped (negative N: killed by signal N), written atomically
A host whose exit file is missing is judged by `host_exit`, which never guesses how long a writer may take.
Each host runs in its own session (so its own process group), detached from the client, which may exit.
Hosts are forked from the warm fork server of this KINETIC_HOME; with KINETIC_NO_FORKSERVER=1, or when
the server cannot start, they start cold as `python runner argv` under a detached reaper. Both paths
produce the same files, and the same launch records (launch_files.py), from which `launch_state` tells
any process what became of a launch whose starter died.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import secrets
import signal
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kinetic_tui.core.backends.local import exit_watch, forkserver, forkserver_client, launch_files
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.paths import RUNNER_FILE, kinetic_home

log = logging.getLogger(__name__)

KILL_TIMEOUT = 5.0  # how long SIGKILLed processes may take to disappear before we give up
# A reaper writes a host's exit file in the loop iteration that reaped it, with no blocking call between:
# while the reaper runs, only CPU scheduling delays the file. This bounds that delay with a 6x margin over
# the worst wake-up delay measured with 64 CPU-bound processes on 2 cores (0.33 s). Past it only a host
# that left no result summary is affected (it is lost rather than given its exit code), and a file
# removed by hand or a write that failed costs no more than this.
REAP_GRACE = 2.0


class LaunchError(KineticError):
    """A job's processes could not be started, or refused to die."""


class StarterLost(LaunchError):
    """The fork server died holding the launch: once `abandon` says nothing of it runs, the work is queued
    again rather than failed, since only our helper failed."""


@dataclass(frozen=True)
class HostProcess:
    """One host of a job, as the store keeps it. `start_time` guards against the pid being reused; `reaper`
    and `reaper_start` name the process that reaps the host and writes its exit file (the fork server or
    the cold path's reaper; None in rows recorded before they were kept)."""

    host: int
    pid: int
    pgid: int
    start_time: int | None = None  # kernel start time (clock ticks after boot); None off Linux
    reaper: int | None = None
    reaper_start: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostProcess:
        return cls(
            int(data["host"]),
            int(data["pid"]),
            int(data["pgid"]),
            data.get("start_time"),
            data.get("reaper"),
            data.get("reaper_start"),
        )

    def is_alive(self) -> bool:
        """True while any process of the host's group runs (the runner or what it started)."""
        stat = forkserver.read_proc_stat(self.pid)
        if stat is not None and self.start_time is not None and stat.start_time != self.start_time:
            return False  # the pid was reused, so the number is free of our group: it is gone
        if stat is not None and stat.state not in ("Z", "X") and stat.pgrp == self.pgid:
            return True  # the leader itself runs: no need to scan /proc for the rest of its group
        return _group_alive(self.pgid)

    def zombie_code(self) -> int | None:
        """The exit code of the host's leader if it has exited and its reaper has not waited for it yet (the
        kernel keeps it in /proc until then), else None."""
        stat = forkserver.read_proc_stat(self.pid)
        if stat is None or stat.state != "Z" or stat.exit_status is None:
            return None
        if self.start_time is not None and stat.start_time != self.start_time:
            return None
        return os.waitstatus_to_exitcode(stat.exit_status)

    def never_ran(self, job_dir: Path) -> bool:
        """True if this host exited without running because its starter died before letting it run."""
        record = launch_files.read_json(launch_files.unrun_path(str(job_dir), self.host))
        return bool(record == [self.pid, self.start_time])

    def reaper_running(self) -> bool:
        """True while the host's reaper lives and is not stopped, so it will write the exit file."""
        if self.reaper is None:
            return False
        if not forkserver.HAVE_PROC:
            return forkserver.pid_alive(self.reaper)
        stat = forkserver.read_proc_stat(self.reaper)
        if stat is None or stat.state in ("Z", "X", "T", "t"):
            return False
        return self.reaper_start is None or stat.start_time == self.reaper_start


def default_runner_file() -> Path:
    """KINETIC_RUNNER_FILE if set (tests point it at a stand-in), else the runner shipped with this package."""
    override = os.environ.get("KINETIC_RUNNER_FILE")
    if override:
        return Path(override).expanduser().resolve()
    return RUNNER_FILE


def log_path(job_dir: Path, host: int) -> Path:
    return Path(job_dir) / "logs" / f"host-{host}.log"


def work_dir(job_dir: Path, host: int) -> Path:
    return Path(job_dir) / "work" / f"host-{host}"


def note(job_dir: Path, text: str) -> None:
    """Append one `[kinetic]` line to host 0's log, where the user reads what happened to the job."""
    path = log_path(job_dir, 0)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as log:
        log.write(f"[kinetic] {text}\n")


def exit_path(job_dir: Path, host: int) -> Path:
    return Path(job_dir) / f"exit-{host}"


def exit_code(job_dir: Path, host: int) -> int | None:
    """The recorded exit code of a host, or None while it has not been reaped."""
    try:
        return int(exit_path(job_dir, host).read_text())
    except FileNotFoundError:
        return None


def host_exit(job_dir: Path, host: HostProcess) -> tuple[bool, int | None]:
    """(ended, exit code) of a host, from what is known rather than a guessed wait.

    (False, None) while any process of its group runs. Once it has ended, the code is its exit file's; else
    the unreaped zombie's (its reaper is stopped or busy); else, while its reaper runs (it has reaped the
    host and is writing the file), what the reaper writes within REAP_GRACE. (True, None) when nobody can
    tell: the reaper is dead (a killed fork server orphans its jobs) or stopped.
    """
    code = exit_code(job_dir, host.host)
    if code is not None:
        return True, code
    if host.is_alive():
        return False, None
    code = host.zombie_code()
    deadline = time.monotonic() + REAP_GRACE
    delay = 0.0005
    while code is None:
        code = exit_code(job_dir, host.host)
        if code is not None or not host.reaper_running() or time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True, code


def wait_exit(job_dir: Path, hosts: int = 1, timeout: float | None = None) -> list[int]:
    """Block until every host has an exit code; TimeoutError (job left running) after `timeout` s."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    delay = 0.0005  # a trivial job ends within milliseconds: poll every few ms at first (a stat or two)
    while True:
        codes = [exit_code(job_dir, i) for i in range(hosts)]
        if all(code is not None for code in codes):
            return [code for code in codes if code is not None]
        if deadline is not None and time.monotonic() >= deadline:
            missing = [i for i, code in enumerate(codes) if code is None]
            raise TimeoutError(f"hosts {missing} of {job_dir} still running after {timeout} s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.005 if time.monotonic() - started < 2 else 0.05)


def write_claim(job_dir: Path) -> str:
    """Record that this process is about to launch the job in `job_dir`; return the launch's fresh token.
    Written while the claim's transaction holds the write lock, so no two claims of one job interleave."""
    token = secrets.token_hex(8)
    claim = {"launcher": launch_files.this_process(), "token": token}
    launch_files.write_atomic(str(Path(job_dir) / launch_files.CLAIM_NAME), json.dumps(claim))
    return token


def claim_token(job_dir: Path) -> str | None:
    claim = launch_files.read_json(str(Path(job_dir) / launch_files.CLAIM_NAME))
    return None if claim is None else str(claim["token"])


def launch(
    job_dir: Path,
    argv: list[str],
    env: dict[str, str],
    hosts: int = 1,
    runner: Path | None = None,
    token: str | None = None,
) -> list[HostProcess]:
    """Start one runner process per host with TPU_WORKER_ID=i and return them in host order.

    `env` replaces the environment entirely. `runner` defaults to `default_runner_file()`. `token` names
    the claim (`write_claim`) this launch carries out; without one the launch claims the job itself.
    ValidationError (nothing changed) for bad arguments; LaunchError if the processes could not start
    (`abandon` then tells whether some of them may run all the same).
    """
    job_dir = Path(job_dir)
    runner_file = Path(runner).resolve() if runner is not None else default_runner_file()
    _validate(job_dir, argv, env, hosts, runner_file)
    idle = _idle_seconds()
    specs = []
    for i in range(hosts):
        work_dir(job_dir, i).mkdir(parents=True, exist_ok=True)
        log_path(job_dir, i).parent.mkdir(mode=0o700, exist_ok=True)
        # readers may open the log as soon as launch returns; owner-only whatever the client's umask: the
        # job's output can hold anything it printed
        log_path(job_dir, i).touch(mode=0o600)
        specs.append(
            {
                "host": i,
                "argv": list(argv),
                "env": {**env, "TPU_WORKER_ID": str(i)},
                "cwd": str(work_dir(job_dir, i)),
                "log": str(log_path(job_dir, i)),
                "job_dir": str(job_dir),
            }
        )
    try:
        started = _start(str(runner_file), specs, idle, token or write_claim(job_dir))
    except forkserver_client.ServerLost as exc:
        raise StarterLost(str(exc)) from exc
    except forkserver_client.SpawnError as exc:
        raise LaunchError(str(exc)) from exc
    if started.exits is not None:
        exit_watch.watch(job_dir, started.exits)
    return [HostProcess(i, pid, pid, start, *started.reaper) for i, (pid, start) in enumerate(started.hosts)]


def _start(runner: str, specs: list[dict[str, Any]], idle: float, token: str) -> forkserver_client.Spawned:
    if os.environ.get("KINETIC_NO_FORKSERVER", "") not in ("", "0"):
        return forkserver_client.spawn_cold(runner, specs, token)
    try:
        return forkserver_client.spawn(_run_dir(), runner, specs, specs[0]["env"], idle, token)
    except forkserver_client.ForkServerUnavailable as exc:
        log.warning("starting the job cold: %s", exc)
        return forkserver_client.spawn_cold(runner, specs, token)


def abandon(job_dir: Path) -> bool:
    """Give up the job's current launch unless a spawner has taken it: True if nothing of it runs or ever
    will (so the job may be failed, cancelled or queued again), False if its processes run or are being
    started (`launch_state` finds them)."""
    token = claim_token(job_dir)
    if token is None:
        return True
    try:
        _, owner = launch_files.take_spawn(str(job_dir), token, "abandoned")
    except FileNotFoundError:  # the job's directory is gone, and nothing can start there
        return True
    return "abandoned" in owner


class LaunchState(NamedTuple):
    """What became of a claimed job's launch: `started` hosts (all of them once `complete`); `failed` says
    why the rest never will start, None while they still may."""

    started: list[HostProcess]
    complete: bool
    failed: str | None
    token: str | None = None  # the launch judged


def launch_state(job_dir: Path, hosts: int) -> LaunchState:
    """Read a claimed job's launch records: adopt the hosts its spawner started, or once its launcher is
    dead (pid and start time) and no spawner took the launch, abandon it. Never waits."""
    claim = launch_files.read_json(str(Path(job_dir) / launch_files.CLAIM_NAME))
    if claim is None:
        return LaunchState([], False, "its launch left no claim record")
    token, launcher = claim["token"], claim["launcher"]
    started = _started(job_dir, token, hosts)
    if len(started) == hosts:
        return LaunchState(started, True, None, token)
    owner = launch_files.read_json(launch_files.spawn_path(str(job_dir), token))
    if owner is None:
        if launch_files.process_alive(launcher):
            return LaunchState(started, False, None, token)  # it is starting the job right now
        if abandon(job_dir):
            return LaunchState([], False, f"its launcher (pid {launcher[0]}) ended before starting it", token)
        return launch_state(job_dir, hosts)  # a spawner took it just now
    if "abandoned" in owner:  # by its launcher, which settles the job, unless it has died since
        why = None if launch_files.process_alive(launcher) else "its launch was given up"
        return LaunchState([], False, why, token)
    if launch_files.process_alive(owner["spawner"]):
        return LaunchState(started, False, None, token)
    started = _started(job_dir, token, hosts)  # what it wrote before it died
    if len(started) == hosts:
        return LaunchState(started, True, None, token)
    missing = min(set(range(hosts)) - {h.host for h in started})
    why = f"the process starting it (pid {owner['spawner'][0]}) died before it started host {missing}"
    return LaunchState(started, False, why, token)


def _started(job_dir: Path, token: str, hosts: int) -> list[HostProcess]:
    """The hosts recorded started, less those that never ran (their starter died before letting them)."""
    records = (launch_files.read_json(launch_files.started_path(str(job_dir), token, i)) for i in range(hosts))
    started = (HostProcess.from_dict(record) for record in records if record is not None)
    return [host for host in started if not host.never_ran(job_dir)]


def _validate(job_dir: Path, argv: list[str], env: dict[str, str], hosts: int, runner: Path) -> None:
    if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
        raise ValidationError(f"hosts must be an integer >= 1, got {hosts!r}")
    if not job_dir.is_dir():
        raise ValidationError(f"job_dir {str(job_dir)!r} is not an existing directory")
    if not runner.is_file():
        raise ValidationError(f"runner file {str(runner)!r} does not exist (set KINETIC_RUNNER_FILE or pass runner=)")
    if not _all_strings(argv):
        raise ValidationError(f"argv must be a list of strings without NUL bytes, got {argv!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise ValidationError(f"env key {key!r} is invalid: use a non-empty string without '=' or NUL")
        if not isinstance(value, str) or "\0" in value:
            raise ValidationError(f"env[{key!r}] must be a string without NUL bytes, got {value!r}")
    done = [i for i in range(hosts) if exit_path(job_dir, i).exists()]
    if done:
        raise ValidationError(f"job_dir {str(job_dir)!r} was already launched: exit-{done[0]} exists")


def _all_strings(items: list[str]) -> bool:
    return isinstance(items, list) and all(isinstance(a, str) and "\0" not in a for a in items)


def _idle_seconds() -> float:
    raw = os.environ.get("KINETIC_FORKSERVER_IDLE", "")
    if not raw:
        return forkserver.DEFAULT_IDLE_SECONDS
    try:
        idle = float(raw)
    except ValueError:
        idle = math.nan
    if not idle > 0 or math.isinf(idle):
        raise ValidationError(f"KINETIC_FORKSERVER_IDLE must be a positive number of seconds, got {raw!r}")
    return idle


def _run_dir() -> Path:
    return kinetic_home() / "run"


def is_alive(pid: int) -> bool:
    """True if the process runs (a zombie counts as gone)."""
    return forkserver.pid_alive(pid)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not forkserver.HAVE_PROC:
        return True
    # killpg also succeeds for zombies, which linger forever where init does not reap orphans.
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = forkserver.read_proc_stat(int(entry))
            if stat is not None and stat.pgrp == pgid and stat.state not in ("Z", "X"):
                return True
    return False


def terminate(hosts: Iterable[HostProcess], grace: float = 5.0) -> None:
    """SIGTERM each host's process group, SIGKILL what is left after `grace` s; return once all are gone.

    Safe for hosts that already exited. LaunchError if a group survives SIGKILL for KILL_TIMEOUT s.
    """
    if not grace >= 0:
        raise ValidationError(f"grace must be >= 0 seconds, got {grace!r}")
    live = [h for h in hosts if h.is_alive()]
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_TIMEOUT)):
        for host in live:
            with contextlib.suppress(ProcessLookupError):  # the group is already gone
                os.killpg(host.pgid, sig)
        live = _wait_gone(live, wait)
        if not live:
            return
    raise LaunchError(f"process groups {[h.pgid for h in live]} survived SIGKILL for {KILL_TIMEOUT} s")


def _wait_gone(hosts: list[HostProcess], timeout: float) -> list[HostProcess]:
    deadline = time.monotonic() + timeout
    while True:
        hosts = [h for h in hosts if h.is_alive()]
        if not hosts or time.monotonic() >= deadline:
            return hosts
        time.sleep(0.01)


def server_status() -> dict[str, Any] | None:
    """The fork server of this KINETIC_HOME: {"pid", "children", "runner"}, or None if none runs."""
    return forkserver_client.server_status(_run_dir())


def shutdown_server(timeout: float = 5.0) -> int | None:
    """Stop this KINETIC_HOME's fork server (running jobs are left alone); return its pid or None."""
    return forkserver_client.shutdown_server(_run_dir(), timeout)
