"""16 colours and NO_COLOR: the console draws with the ANSI theme, whose colours the
terminal maps itself, so it never emits 256-colour or truecolour escapes; with NO_COLOR it emits no colour.

Checked twice: headless, on the styles of every cell the compositor draws (every view, the job screen, the
help modal), and end to end in tmux, on the escape codes a real terminal receives.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.color import ColorType
from textual.pilot import Pilot

from kinetic_tui.app import THEME, KineticApp
from kinetic_tui.core.console import Console
from tests.tui.conftest import SIZE, AppFactory

VIEW_KEYS = "123456"
MARKERS = {
    "1": "Pools (",
    "2": "Jobs ·",
    "3": "Tuning studies",
    "4": "Model versions",
    "5": "Scaling:",
    "6": "DAG",
}  # text each view shows even when empty: the capture is taken once it is there
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
EXTENDED = {"38", "48"}  # 38;5;N / 48;5;N (256 colours) and 38;2;R;G;B / 48;2;R;G;B (truecolour)
COLOUR_CODES = {str(code) for code in (*range(30, 38), *range(40, 48), *range(90, 98), *range(100, 108))}


async def finished_jobs(console: Console) -> None:
    """A succeeded and a failed job: status colours and a traceback to draw."""
    await console.jobs.submit("tui_user:add", args=[2, 3], name="adder", wait=True)
    await console.jobs.submit("tui_user:boom", name="bomb", wait=True)


def colour_types(app: KineticApp) -> set[ColorType]:
    """The kinds of colour in every cell on screen now, after Textual's filters (NO_COLOR among them)."""
    seen: set[ColorType] = set()
    for strip in app.screen._compositor.render_strips():  # what the driver would write, as styled segments
        for segment in strip:
            if segment.style is not None:
                seen.update(colour.type for colour in (segment.style.color, segment.style.bgcolor) if colour)
    return seen


async def every_screen(app: KineticApp, pilot: Pilot) -> set[ColorType]:
    """Colour kinds of the six views, a failed job's screen and the help modal."""
    seen: set[ColorType] = set()
    for key in VIEW_KEYS:
        await pilot.press(key)
        await app.reload_visible()
        await pilot.pause()
        seen |= colour_types(app)
    await pilot.press("2")
    await app.reload_visible()
    app.current_view.table.select_key(app.current_view.table.keys[0])  # type: ignore[union-attr]
    await pilot.press("enter")
    await app.reload_visible()
    await pilot.pause()
    seen |= colour_types(app)
    await pilot.press("question_mark")
    await pilot.pause()
    return seen | colour_types(app)


async def test_the_console_uses_the_ansi_theme(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE):
        assert app.theme == THEME == "ansi-dark"
        assert app.current_theme.ansi and app.native_ansi_color
        assert sorted(app.available_themes) == ["ansi-dark", "ansi-light"]  # what the theme picker offers


async def test_every_screen_draws_with_the_16_ansi_colours_only(make_app: AppFactory, console: Console) -> None:
    await finished_jobs(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        seen = await every_screen(app, pilot)
    assert seen <= {ColorType.DEFAULT, ColorType.STANDARD}, seen
    assert ColorType.STANDARD in seen  # it does use colour: statuses, the selected row, the footer keys


async def test_no_color_draws_no_colour(
    make_app: AppFactory, console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    await finished_jobs(console)
    monkeypatch.setenv("NO_COLOR", "1")  # read when the app is created
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        seen = await every_screen(app, pilot)
    assert seen <= {ColorType.DEFAULT}, seen


# -- a real terminal ------------------------------------------------------------------------------------


def bad_codes(screen: str, no_color: bool) -> set[str]:
    """SGR parameters a 16-colour terminal (or, with `no_color`, a colourless one) must never receive."""
    bad: set[str] = set()
    for params in SGR.findall(screen):
        codes = re.split(r"[;:]", params)
        for index, code in enumerate(codes):
            if code in EXTENDED and index + 1 < len(codes) and codes[index + 1] in ("2", "5"):
                bad.add(f"{code};{codes[index + 1]}")
            elif no_color and code in COLOUR_CODES:
                bad.add(code)
    return bad


class Tmux:
    """One console in a detached tmux session on a private server, captured with its escape codes."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def capture_when(self, marker: str, timeout: float = 15.0) -> str:
        """The screen once `marker` shows and the refresh has landed: two captures in a row are the same."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            screen = self("capture-pane", "-e", "-p")
            if marker in SGR.sub("", screen) and screen == last:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{marker!r} never appeared and held; the screen:\n{SGR.sub('', screen)}")
            last = screen if marker in SGR.sub("", screen) else None
            time.sleep(0.05)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux(f"kinetic-colours-{os.getpid()}")
    yield server
    subprocess.run(["tmux", "-L", server.socket, "kill-server"], capture_output=True)


@pytest.mark.parametrize("no_color", [False, True], ids=["16-colours", "NO_COLOR"])
def test_a_real_terminal_receives_no_256_or_truecolour_escapes(
    no_color: bool, console: Console, tmux: Tmux, kinetic_home: Path
) -> None:
    asyncio.run(finished_jobs(console))
    # COLORTERM=truecolor: the terminal would accept anything, so only the app's palette limits the codes
    env = {"KINETIC_HOME": str(kinetic_home), "COLORTERM": "truecolor", **({"NO_COLOR": "1"} if no_color else {})}
    command = shlex.join(
        ["env", *(f"{name}={value}" for name, value in env.items()), sys.executable, "-m", "kinetic_tui"]
    )
    tmux("new-session", "-d", "-x", "100", "-y", "30", command)
    screens = [tmux.capture_when("kinetic ·")]
    for key in VIEW_KEYS:
        tmux("send-keys", key)
        screens.append(tmux.capture_when(MARKERS[key]))
    tmux("send-keys", "q")
    captured = "".join(screens)
    assert bad_codes(captured, no_color) == set()
    codes = {code for params in SGR.findall(captured) for code in re.split(r"[;:]", params)}
    assert bool(codes & COLOUR_CODES) is not no_color  # colour when allowed, none under NO_COLOR
