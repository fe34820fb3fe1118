"""The installed `kinetic-tui --demo` in a real terminal: tmux, 120x35, keys sent and the screen read back
with `capture-pane`, exactly what an operator over SSH gets. Pilot tests drive the app in-process; only
this one proves the console script starts, draws in a real terminal, fills live and quits cleanly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kinetic_tui.core.demo.fill import BASELINE, ENDPOINT, LONG_JOB, POOLS, PREEMPTIBLE, STUDY
from tests.helpers import processes

SESSION = "demo"
WIDTH, HEIGHT = 120, 35
FILL_TIMEOUT = 240.0  # the whole demo fills in ~30 s here (its live jobs come last); a loaded machine takes longer
KEY_TIMEOUT = 10.0
EXIT_TIMEOUT = 5.0
# what each view must show once the demo has filled it, by key: words of fill.py's scenario
VIEW_WORDS = {
    "1": [POOLS[0][0], "emulated"],  # the tpu-v5e pool
    "2": [LONG_JOB, "FAILED"],  # the long job, and the failing job's status
    "3": [BASELINE, PREEMPTIBLE, STUDY, "Completed"],  # names are never cut
    "4": ["Production", "Staging", "Archived"],
    "5": [ENDPOINT, "hit ratio"],
    "6": ["preprocess", "#3"],  # the canonical pipeline's first step; its third run
}
HELP_WORDS = ["Keys: Pipelines", "Esc or ? closes"]


def console_script() -> str | None:
    """The `kinetic-tui` installed next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).with_name("kinetic-tui")
    return str(beside) if beside.exists() else shutil.which("kinetic-tui")


def exited(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (tmux's server may exit before reaping its pane)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


@pytest.fixture
def kinetic_home(kinetic_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's home, seen from pytest, is the demo workspace, so the suite's leftover-process check
    (tests/conftest.py) judges the demo's processes too. The console itself gets a separate KINETIC_HOME
    (see `tmux`); the test stops what the demo started with `down` once the console is gone."""
    demo = tmp_path / "demo"
    monkeypatch.setenv("KINETIC_HOME", str(demo))
    return demo


class Tmux:
    """One private tmux server (its own socket, no user config) running one session."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"kinetic-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # the pane's size comes from its pty, as in a person's terminal: COLUMNS and LINES (pytest-xdist's
        # workers export 80 and 24) would override it and squeeze the console into 80x24
        self.env = {name: value for name, value in env.items() if name not in ("COLUMNS", "LINES")}
        self.pane_pid: int | None = None
        self.socket_path: Path | None = None

    def start(self, *command: str, size: tuple[int, int] = (WIDTH, HEIGHT)) -> int:
        """Start the session running `command` in a `size` (columns, rows) terminal; returns the pid of the
        pane's process."""
        self("new-session", "-d", "-s", SESSION, "-x", str(size[0]), "-y", str(size[1]), *command)
        pid, path = self("display-message", "-p", "-t", SESSION, "#{pane_pid} #{socket_path}").stdout.split(maxsplit=1)
        self.pane_pid, self.socket_path = int(pid), Path(path.strip())
        return self.pane_pid

    def kill(self) -> None:
        """Kill the server (tmux leaves its socket file behind), and the pane's process if the hang-up did
        not end it: a failed test must not leave a demo filling its workspace behind the suite's cleanup."""
        self("kill-server", check=False)
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)
        if self.pane_pid is None:
            return
        deadline = time.monotonic() + EXIT_TIMEOUT
        while not exited(self.pane_pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pane_pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=check,
        )

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", SESSION).stdout

    def alive(self) -> bool:
        return self("has-session", "-t", SESSION, check=False).returncode == 0

    def wait_for(self, words: list[str], timeout: float, what: str) -> str:
        """Poll the pane until every word is on screen; fail with the last screen otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if all(word in screen for word in words):
                return screen
            if time.monotonic() > deadline:
                missing = [word for word in words if word not in screen]
                pytest.fail(f"{what}: {missing} not on screen within {timeout:g} s; the screen was:\n{screen}")
            time.sleep(0.1)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    env = {
        **os.environ,
        "KINETIC_HOME": str(tmp_path / "home"),
        "KINETIC_DEMO_HOME": str(tmp_path / "demo"),
        "TERM": "xterm-256color",
    }
    server = Tmux(env)
    try:
        yield server
    finally:
        server.kill()


def test_the_installed_demo_console_shows_every_view_in_tmux_and_quits_on_q(tmux: Tmux, tmp_path: Path) -> None:
    script = console_script()
    assert script is not None, "the kinetic-tui console script is not installed next to this Python or on PATH"
    # `env` sets TERM inside the pane (tmux would set its own), then execs the console: the pane's process
    pane_pid = tmux.start("env", "TERM=xterm-256color", script, "--demo")

    tmux.wait_for(VIEW_WORDS["1"], FILL_TIMEOUT, "view 1 after start")
    for key, words in VIEW_WORDS.items():
        tmux("send-keys", "-t", SESSION, key)
        tmux.wait_for(words, FILL_TIMEOUT, f"view {key}")

    tmux("send-keys", "-t", SESSION, "?")
    tmux.wait_for(HELP_WORDS, KEY_TIMEOUT, "help after ?")
    tmux("send-keys", "-t", SESSION, "Escape")
    deadline = time.monotonic() + KEY_TIMEOUT
    while any(word in tmux.screen() for word in HELP_WORDS):
        assert time.monotonic() < deadline, f"Escape did not close the help:\n{tmux.screen()}"
        time.sleep(0.1)
    assert "preprocess" in tmux.screen()  # back on view 6

    tmux("send-keys", "-t", SESSION, "q")
    deadline = time.monotonic() + EXIT_TIMEOUT
    while tmux.alive() or not exited(pane_pid):  # the session ends on the pty's EOF, a moment before the exit
        assert time.monotonic() < deadline, f"the console did not exit within {EXIT_TIMEOUT:g} s of q"
        time.sleep(0.1)
    assert not (tmp_path / "home" / "state.db").exists(), "the demo opened the real KINETIC_HOME's store"

    # the console is gone, its workspace's supervisor and fork server are not: `down` stops them (and cancels
    # the demo's long job), as a user leaving the demo would
    demo = tmp_path / "demo"
    assert processes.serving(demo), "the demo left nothing running: this check would prove nothing"
    down = subprocess.run(
        [script, "down", "--yes"], env={**tmux.env, "KINETIC_HOME": str(demo)}, capture_output=True, text=True
    )
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + EXIT_TIMEOUT
    while left := processes.serving(demo):
        assert time.monotonic() < deadline, f"still serving the demo after down: {left}"
        time.sleep(0.05)
