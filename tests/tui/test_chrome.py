"""The console's chrome: the header (workspace and view tabs) and the footer's key hints, as pure renderers
and as the widgets that draw them, plus what the first frame holds (only what is seen, so the first paint
stays cheap)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from textual.screen import Screen

from kinetic_tui import app as app_module
from kinetic_tui.app import KineticApp
from kinetic_tui.core.console import Console
from kinetic_tui.render.header import header_text
from kinetic_tui.render.key_hints import CORNER_BAR, KeyHint, key_hints
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.views.base import View
from kinetic_tui.views.clusters import ClustersView
from kinetic_tui.views.jobs import JobsView
from kinetic_tui.widgets.key_footer import KeyFooter
from tests.tui.conftest import SIZE, AppFactory, build_workspace, wait_for

JOBS_KEYS = [
    KeyHint("s", "Submit"),
    KeyHint("c", "Cancel job"),
    KeyHint("o", "Sort"),
    KeyHint(":", "Command"),
    KeyHint("/", "Filter"),
    KeyHint("?", "Keys"),
    KeyHint("q", "Quit"),
]
PALETTE = KeyHint("^p", "palette")


def _text(segments: Sequence[Segment]) -> str:
    return "".join(segment.text for segment in segments)


def test_key_hints_fill_80_columns_with_the_palette_key_at_the_right_edge() -> None:
    line = _text(key_hints(JOBS_KEYS, 80, PALETTE).segments)
    assert line == " s Submit  c Cancel job  o Sort  : Command  / Filter  ? Keys  q Quit▏^p palette "


def test_a_hint_that_does_not_fit_is_left_out_whole() -> None:
    line = _text(key_hints(JOBS_KEYS, 40, PALETTE).segments)
    assert line == " s Submit  c Cancel job" + " " * 5 + f"{CORNER_BAR}^p palette "
    assert _text(key_hints(JOBS_KEYS, 40).segments).rstrip() == " s Submit  c Cancel job  o Sort"


@given(st.integers(min_value=0, max_value=200))
def test_key_hints_take_exactly_the_width_given(width: int) -> None:
    assert sum(len(segment.text) for segment in key_hints(JOBS_KEYS, width, PALETTE).segments) == width


def test_keys_are_styled_over_the_base_and_a_disabled_hint_is_dim() -> None:
    base, key = Style(color="white"), Style(color="magenta", bold=True)
    line = key_hints([KeyHint("a", "Add"), KeyHint("d", "Remove", enabled=False)], 30, None, base, key)
    styles = {segment.text: segment.style for segment in line.segments}
    assert styles["a"] == base + key and styles[" Add"] == base
    assert styles["d"] is not None and styles["d"].dim and styles["d"].color == key.color
    assert styles[" Remove"] is not None and styles[" Remove"].dim


def test_the_line_knows_which_hint_each_column_shows() -> None:
    line = key_hints(JOBS_KEYS, 40, PALETTE)
    text = _text(line.segments)
    assert line.hint_at(text.index("Cancel")) == JOBS_KEYS[1]
    assert line.hint_at(text.index("palette")) == PALETTE
    assert line.hint_at(25) is None  # the gap before the corner
    assert [hint for _, _, hint in line.spans] == [*JOBS_KEYS[:2], PALETTE]


def test_the_header_names_the_workspace_and_marks_the_current_tab() -> None:
    tabs = [("1", "Clusters"), ("2", "Jobs"), ("3", "Training")]
    text = header_text("profile local (local) · cluster c", tabs, "2", readonly=True)
    assert text.plain == "kinetic · profile local (local) · cluster c  READ-ONLY\n1 Clusters   2 Jobs   3 Training"
    spans = sorted((str(span.style), text.plain[span.start : span.end]) for span in text.spans)
    assert spans == [("bold", "READ-ONLY"), ("bold", "kinetic"), ("reverse", " 2 Jobs ")]
    assert not text.style  # only those spans are styled, not the whole header
    assert header_text("", tabs, None, readonly=False).plain == "kinetic\n1 Clusters  2 Jobs  3 Training"


def test_workspace_text_is_not_markup() -> None:
    assert header_text("profile [bold]x[/] (local)", [], None, readonly=False).plain.startswith(
        "kinetic · profile [bold]x[/] (local)"
    )


def _footer_line(app: KineticApp) -> str:
    footer = app.screen.query_one(KeyFooter)
    return footer.render_line(0).text


async def test_the_footer_lists_the_focused_views_keys_and_readonly_hides_mutating_ones(make_app: AppFactory) -> None:
    for readonly, expected in ((False, " a Add pool  d Remove pool  : Command"), (True, " : Command  / Filter")):
        app = make_app(readonly=readonly)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(lambda app=app: app.focused is not None, pilot)
            await pilot.pause()
            line = _footer_line(app)
            assert line.startswith(expected) and line.endswith(f"{CORNER_BAR}^p palette ")
            assert len(line) == SIZE[0]


async def test_the_footer_follows_the_screen_it_is_on(make_app: AppFactory, console: Console) -> None:
    ids = await build_workspace(console)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        app.open_job(ids["done"])
        await wait_for(lambda: isinstance(app.screen, JobScreen), pilot)
        await pilot.pause()
        assert _footer_line(app).startswith(" end Follow  w Wrap  t Timestamps  esc Back")
        await pilot.press("escape", "2")
        await pilot.pause()
        assert _footer_line(app).startswith(" s Submit  c Cancel  f Failed  o Sort")


async def test_a_click_on_a_hint_presses_its_key(make_app: AppFactory) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.focused is not None, pilot)
        await pilot.pause()
        column = _footer_line(app).index("Keys")
        await pilot.click(KeyFooter, offset=(column, 0))
        await wait_for(lambda: type(app.screen).__name__ == "HelpScreen", pilot)


class _FirstFrame(KineticApp):
    """Records the widgets on screen and the focus when the first frame reaches the terminal."""

    CSS_PATH = Path(app_module.__file__).with_name(KineticApp.CSS_PATH)  # else relative to this file

    def _display(self, screen: Screen[Any], renderable: RenderableType | None) -> None:
        if renderable is not None and not hasattr(self, "first_frame"):
            self.first_frame = [type(node).__name__ for node in self.screen.walk_children()]
            self.focus_at_first_frame = self.focused
        super()._display(screen, renderable)


async def test_the_first_frame_draws_only_the_header_and_the_footer_then_the_first_view(console: Console) -> None:
    """Every widget costs the first paint; the first view (its tables, the focus) and the data come after."""
    app = _FirstFrame(console)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: hasattr(app, "first_frame"), pilot)
        assert app.first_frame == ["Static", "KeyFooter"]
        assert app.focus_at_first_frame is None
        await wait_for(lambda: app.focused is not None, pilot)
        assert [type(node).__name__ for node in app.screen.walk_children()] == [
            "Static",
            "ClustersView",
            "VirtualTable",
            "VirtualTable",
            "KeyFooter",
        ]
        assert app.focused is app.query_one("#clusters")
        assert [type(view) for view in app.query(View)] == [ClustersView]


class _KeyBeforeReady(KineticApp):
    """A view key handled before `Ready` (the terminal delivered it with the first frame)."""

    CSS_PATH = Path(app_module.__file__).with_name(KineticApp.CSS_PATH)

    async def on_ready(self) -> None:
        await self.action_show_view("2")
        await super().on_ready()


async def test_a_view_key_pressed_before_the_first_view_mounted_shows_that_view(console: Console) -> None:
    app = _KeyBeforeReady(console)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(lambda: app.focused is not None, pilot)
        assert [type(view) for view in app.query(View)] == [JobsView]
        assert app.current_view is app.query_one(JobsView)
