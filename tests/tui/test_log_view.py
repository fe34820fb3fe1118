"""The job log widget on its own: scrolling by keys, wheel and scrollbar, follow and "N new lines", wrap,
and which rows it draws (only visible ones, each once until its look changes)."""

from __future__ import annotations

from textual import events
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from kinetic_tui.widgets.log_view import LogView

SIZE = (60, 12)  # the log fills the screen: 12 rows, 58 columns beside the scrollbar


class LogApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[tuple[str, bool]] = []

    def compose(self) -> ComposeResult:
        yield LogView(max_lines=1_000, clock=lambda: 0.0)

    def on_log_view_status_changed(self, event: LogView.StatusChanged) -> None:
        self.statuses.append((event.status, event.alert))


def rows(log: LogView) -> list[str]:
    """What the view shows, row by row, as the screen draws it."""
    return [log.render_line(y).text.rstrip() for y in range(log.scrollable_content_region.height)]


async def fed(pilot: Pilot, log: LogView, lines: list[str]) -> None:
    log.feed(lines)
    log.flush()
    await pilot.pause()


def wheel(log: LogView, up: bool) -> None:
    event = (events.MouseScrollUp if up else events.MouseScrollDown)(
        log, 5, 5, 0, -1 if up else 1, 0, False, False, False
    )
    log.post_message(event)


async def test_following_shows_the_newest_lines_under_a_real_scrollbar() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        await fed(pilot, log, [f"line {n}" for n in range(100)])
        assert log.show_vertical_scrollbar and log.scrollable_content_region.width == SIZE[0] - 2
        assert log.virtual_size.height == 100 and log.scroll_offset.y == log.max_scroll_y == 88
        assert rows(log) == [f"line {n}" for n in range(88, 100)]
        assert log.buffer.follow and app.statuses[-1] == ("100 lines · following", False)


async def test_the_wheel_pauses_follow_counts_new_lines_and_end_follows_again() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        await fed(pilot, log, [f"line {n}" for n in range(100)])
        wheel(log, up=True)
        await pilot.pause()
        top = log.scroll_offset.y
        assert top < 88 and not log.buffer.follow and log.buffer.top == top
        await fed(pilot, log, ["late 1", "late 2", "late 3"])
        assert log.scroll_offset.y == top and rows(log)[0] == f"line {top}"  # the view stays put
        assert log.buffer.new_lines == 3
        assert app.statuses[-1] == ("103 lines · ▼ 3 new lines (End follows)", True)
        await pilot.press("end")
        assert log.buffer.follow and log.buffer.new_lines == 0 and rows(log)[-1] == "late 3"
        assert app.statuses[-1] == ("103 lines · following", False)
        wheel(log, up=True)
        await pilot.pause()
        wheel(log, up=False)  # back down to the last row: following again without End
        await pilot.pause()
        assert log.buffer.follow and log.scroll_offset.y == log.max_scroll_y


async def test_dragging_the_scrollbar_to_the_top_pauses_and_shows_the_first_lines() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        await fed(pilot, log, [f"line {n}" for n in range(100)])
        bar = log.vertical_scrollbar
        thumb = bar.region.height - 1  # following: the thumb sits at the bottom of the track
        await pilot.mouse_down(bar, offset=(0, thumb))
        await pilot.hover(bar, offset=(0, 0))  # the whole track up: past the first line, clamped to it
        await pilot.mouse_up(bar, offset=(0, 0))
        await pilot.pause()
        assert log.scroll_offset.y == 0 and not log.buffer.follow
        assert rows(log)[:2] == ["line 0", "line 1"]


async def test_keys_scroll_by_row_and_page() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        log.focus()
        await fed(pilot, log, [f"line {n}" for n in range(100)])
        await pilot.press("up", "up", "pageup")
        assert log.scroll_offset.y == 88 - 2 - 12 and log.buffer.top == 74 and not log.buffer.follow
        await pilot.press("home")
        assert rows(log)[0] == "line 0"
        await pilot.press("pagedown")
        assert log.buffer.top == 12


async def test_only_rows_that_change_are_drawn_again() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        drawn: list[int] = []
        draw = log._draw

        def counting(line: int, part: int, width: int, style):  # type: ignore[no-untyped-def]
            drawn.append(log.buffer.trimmed + line)
            return draw(line, part, width, style)

        log._draw = counting  # type: ignore[method-assign]
        await fed(pilot, log, [f"line {n}" for n in range(100)])
        assert sorted(drawn) == list(range(88, 100))  # only the visible rows, each once
        drawn.clear()
        log.refresh()
        await pilot.pause()
        assert drawn == []  # a repaint reuses every strip
        await fed(pilot, log, ["new 1", "new 2"])
        assert sorted(drawn) == [100, 101]  # following: only the lines that scrolled in
        drawn.clear()
        log.highlight = "line 9"
        await pilot.pause()
        assert len(drawn) == 12 and "line 9" in rows(log)[-3]  # the highlight redraws every row
        drawn.clear()
        await pilot.press("t")
        await pilot.pause()
        assert len(drawn) == 12 and rows(log)[-1] == "00:00:00.000 new 2"


async def test_wrapped_rows_scroll_by_row_and_follow_the_last_one() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        log.focus()
        width = SIZE[0] - 2
        await fed(pilot, log, ["head", *("x" * (width * 3) for _ in range(10))])
        await pilot.press("w")
        assert log.virtual_size.height == 1 + 30 and log.buffer.follow
        assert rows(log) == ["x" * width] * 12
        await pilot.press("up")  # 11 lines fit the buffer's 12-line viewport, yet the view is not at the end
        assert not log.buffer.follow and log.scroll_offset.y == 18
        assert log.buffer.top == 6 > log.buffer.bottom  # row 18 is the third row of line 6
        await fed(pilot, log, ["tail"])
        assert log.scroll_offset.y == 18 and log.buffer.new_lines == 1
        await pilot.press("home")
        assert rows(log)[:2] == ["head", "x" * width]
        await pilot.press("end")
        assert rows(log)[-1] == "tail" and log.buffer.follow


async def test_trimming_keeps_a_paused_view_on_the_same_lines() -> None:
    app = LogApp()
    async with app.run_test(size=SIZE) as pilot:
        log = app.query_one(LogView)
        await fed(pilot, log, [f"line {n}" for n in range(1_000)])
        log.reveal(500)
        await pilot.pause()
        first = rows(log)[0]
        await fed(pilot, log, [f"more {n}" for n in range(100)])  # drops lines 0-99
        assert log.buffer.trimmed == 100 and rows(log)[0] == first and not log.buffer.follow


async def test_a_reader_far_ahead_of_the_flush_queues_only_what_the_buffer_keeps() -> None:
    async with LogApp().run_test(size=SIZE) as pilot:
        log = pilot.app.query_one(LogView)
        for start in range(0, 3_500, 500):  # seven batches before one flush: 3,500 lines for 1,000 kept
            log.feed([f"line {n}" for n in range(start, start + 500)])
        assert len(log._pending) == 1_000
        assert log.flush() == 3_500
        assert log.buffer.lines == [f"line {n}" for n in range(2_500, 3_500)]
        assert log.buffer.trimmed == 2_500 and log.status.startswith("1000 lines · 2500 trimmed")
        await pilot.pause()
        assert rows(log)[-1] == "line 3499"
