"""The job screen: one job's status, its live log, and its result or remote traceback once it ends.

`/` searches the log (the box opens empty; the status line counts the matches, `3/17`, and every match is
highlighted); `c` cancels the job after a confirmation, and is dimmed once the job has finished.

The log is read by a thread worker that follows the job's log files and feeds the `LogView` (which
batches every 100 ms). It reads through the backend with a stop event rather than `Console.logs(follow)`
so that leaving the screen ends the reader at once instead of when the job ends. It asks for the newest
`max_lines` only (what the view keeps): a long log already written is opened at its end, the lines before
counted as trimmed rather than decoded, so a finished million-line log shows as fast as a short one.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, Static
from textual.worker import Worker

from kinetic_tui.core.backends.base import skipped_before
from kinetic_tui.core.console import Console, RemoteJobFailed
from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.host import ConsoleHost, console_host
from kinetic_tui.render.formatting import humanize_age, status_cell
from kinetic_tui.screens.dialogs import ConfirmScreen, Field, FormScreen
from kinetic_tui.widgets.key_footer import KeyFooter
from kinetic_tui.widgets.log_view import LogView


def summary_text(job: JobSnapshot, now: float) -> str:
    """Two lines that fit 80 columns: who the job is, and where it stands."""
    took = "-" if job.started_at is None else humanize_age(job.started_at, job.finished_at or now)
    phase = f" · phase {job.phase}" if job.phase else ""
    return (
        f"{job.job_id} · {job.name or job.func} · {job.accelerator} on {job.pool or '-'}\n"
        f"{status_cell(JobStatus, job.status)} · age {humanize_age(job.created_at, now)} · took {took}{phase}"
    )


class JobScreen(Screen[None]):
    DEFAULT_CSS = """
    JobScreen #job-summary { height: 2; background: $panel; padding: 0 1; }
    JobScreen #job-outcome { height: auto; max-height: 8; border-bottom: solid $accent; padding: 0 1; }
    JobScreen #job-log { height: 1fr; padding: 0 1; }
    JobScreen #log-status { height: 1; padding: 0 1; }
    JobScreen #log-search { dock: bottom; margin-bottom: 1; border: none; height: 1; }
    """
    BINDINGS = [
        Binding("escape", "back", "Back", id="job.back"),
        Binding("slash", "search", "Search", id="job.search"),
        Binding("n", "next_match(1)", "Next", show=False, id="job.next_match"),
        Binding("N", "next_match(-1)", "Prev", show=False, id="job.previous_match"),
        Binding("s", "save", "Save", id="job.save"),
        Binding("c", "cancel", "Cancel", id="job.cancel"),
    ]

    def __init__(self, job_id: str, max_lines: int = 10_000) -> None:
        super().__init__()
        self.job_id = job_id
        self.max_lines = max_lines
        self.outcome: str | None = None  # the result or traceback text, once the job has ended
        self._stop = threading.Event()
        self._query = ""
        self._match: int | None = None
        self._status: str | None = None  # the job's status as last read
        self._log_status = ""
        self._alert = False  # new lines wait below a paused log

    @property
    def host(self) -> ConsoleHost:
        return console_host(self.app)

    @property
    def console(self) -> Console:
        return self.host.service

    def compose(self) -> ComposeResult:
        yield Static(self.job_id, id="job-summary")
        with VerticalScroll(id="job-outcome"):
            yield Static("", id="job-result")
        yield LogView(self.max_lines, clock=self.host.now, id="job-log")
        yield Static("", id="log-status")
        search = Input(placeholder="search the log (Enter finds, Esc closes)", id="log-search")
        search.cursor_blink = False
        yield search
        yield KeyFooter()

    @property
    def log_view(self) -> LogView:
        return self.query_one("#job-log", LogView)

    def key_bindings(self) -> list[Binding]:
        """This screen's keys and its log's, for `?`."""
        return [*Binding.make_bindings(self.BINDINGS), *Binding.make_bindings(LogView.BINDINGS)]

    def on_mount(self) -> None:
        self.query_one("#job-outcome").display = False
        self.query_one("#log-search").display = False
        self.log_view.focus()
        self.run_worker(self._follow_logs, thread=True, group="job-logs", exit_on_error=False)
        self.run_worker(self.reload(), group="job-reload", exit_on_error=False)

    def on_log_view_status_changed(self, event: LogView.StatusChanged) -> None:
        self._log_status, self._alert = event.status, event.alert
        self._show_status()

    def _show_status(self) -> None:
        status = self._log_status
        if self._query:
            found = self.log_view.buffer.matches(self._query)
            at = 0 if self._match is None or not found else bisect.bisect_left(found, self._match) + 1
            status += f" · /{self._query}: {at}/{len(found)}"
        self.query_one("#log-status", Static).update(Text(status, style="reverse" if self._alert else "dim"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        self.host.report_failure(event.worker)

    def on_unmount(self) -> None:
        self._stop.set()

    def _follow_logs(self) -> None:
        view = self.log_view
        for batch in self.console.jobs.read_logs(self.job_id, follow=True, stop=self._stop, keep=self.max_lines):
            view.feed(batch, skipped_before(batch))
        view.end()

    async def reload(self) -> None:
        """Called by the app's poll while this screen is on top."""
        job = await self.console.jobs.get(self.job_id)
        if job.status != self._status:
            self._status = job.status
            self.refresh_bindings()  # `c` dims once the job has finished
        self.query_one("#job-summary", Static).update(summary_text(job, self.host.now()))
        if self.outcome is None and JobStatus(job.status).finished:
            self.outcome = await self._outcome(job)
            self.query_one("#job-result", Static).update(self.outcome)
            self.query_one("#job-outcome").display = True

    async def _outcome(self, job: JobSnapshot) -> str:
        try:
            result = await self.console.jobs.result(self.job_id)
        except RemoteJobFailed as exc:
            return f"✗ {exc.error_type} in phase {exc.phase or 'execute'}\n{exc.traceback or exc}"
        except KineticError as exc:
            return f"✗ {job.status}: {exc}"
        return f"✓ result: {result.value_repr}"

    # -- search and save -------------------------------------------------------------------------------

    def why_not(self, action: str) -> str | None:
        """Why a key cannot act now (the footer dims it; `?` and a press say why): cancel of a finished job."""
        if action != "cancel" or self._status is None or not JobStatus(self._status).finished:
            return None
        return f"job {self.job_id} is already {self._status}; only PENDING or RUNNING jobs can be cancelled"

    def action_cancel(self) -> None:
        reason = self.why_not("cancel")
        if reason is not None:
            self.notify(reason, severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.host.run_command(f"cancel {self.job_id}")

        self.app.push_screen(ConfirmScreen(f"Cancel job {self.job_id}?"), answered)

    def action_search(self) -> None:
        """The box opens empty: a new search is typed afresh (n/N repeat the last one)."""
        search = self.query_one("#log-search", Input)
        search.value = ""
        search.display = True
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        event.input.display = False
        self.log_view.focus()
        self._query = event.value
        self.log_view.highlight = event.value
        self._match = None
        self.action_next_match(1)

    def action_back(self) -> None:
        """Esc closes the search prompt first, then the screen."""
        search = self.query_one("#log-search", Input)
        if not search.display:
            self.app.pop_screen()
            return
        search.display = False
        self.log_view.focus()

    def action_next_match(self, direction: int) -> None:
        if not self._query:
            return
        buffer = self.log_view.buffer
        found = (
            buffer.next_match(self._query, self._match)
            if direction > 0
            else buffer.previous_match(self._query, self._match)
        )
        if found is None:
            self.notify(f"no line matches {self._query!r}", severity="warning")
            self._show_status()
            return
        self._match = found
        self.log_view.reveal(found)
        self._show_status()

    def action_save(self) -> None:
        def chosen(values: dict[str, str] | None) -> None:
            if not values or not values["path"]:
                return
            path = Path(values["path"]).expanduser()
            try:
                count = self.log_view.buffer.save(path)
            except OSError as exc:
                self.notify(f"cannot save to {path}: {exc.strerror or exc}", severity="error")
                return
            self.notify(f"saved {count} lines to {path}")

        self.app.push_screen(FormScreen("Save the log", (Field("path", "Path", f"{self.job_id}.log"),)), chosen)
