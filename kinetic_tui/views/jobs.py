"""View 2, Jobs: every job newest first, with filter, sort, submit, cancel and the job screen.

`space` marks rows and `c` cancels the marked jobs (or, with none marked, the selected one) after one
confirmation; `f` moves to the next failed job; the line under the table shows the selected job whole.
A map's inputs are one row, their batch, with its progress; Enter on it shows them under it (newest-first
order only: a filter or a sort lists every job on its own).

Large lists: the table is windowed (`VirtualTable`). A reload hands it the job ids in order and a function
that renders one job's row, so with 10,000 jobs a poll costs one list of ids on the event loop and rows
are rendered only for the visible page (`benchmarks/bench_jobs_view.py`). A filter or a sort needs every
row's text, so only then is every row rendered on a reload.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label

from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.render.batches import batch_detail, batch_row, group_keys, member_row
from kinetic_tui.render.tables import filter_rows, job_row, sort_rows
from kinetic_tui.screens.dialogs import ConfirmScreen, Field
from kinetic_tui.views.base import View
from kinetic_tui.widgets.virtual_table import Row, VirtualTable

FIRST_PAGE = 200  # rows of the first, fast listing: more than any terminal shows
# minimum widths: each column widens to its content when the terminal has room (`VirtualTable`)
COLUMNS = (("ID", 12), ("NAME", 12), ("ACCEL", 8), ("POOL", 6), ("STATUS", 11), ("AGE", 4), ("TOOK", 4))
SUBMIT_FORM = (
    Field("ref", "MODULE:FUNC", placeholder="pkg.module:func"),
    Field("accelerator", "Accelerator", "cpu"),
    Field("args", "Args (JSON list)", "[]"),
    Field("kwargs", "Kwargs (JSON obj)", "{}"),
    Field("name", "Name", placeholder="optional"),
)
SHOWN_IN_QUESTION = 3  # job ids a bulk cancel's question names before "and N more"


def submit_line(values: dict[str, str]) -> str:
    """The submit form's answers as a `submit` line; empty optional fields (and `{}` kwargs) are left out."""
    words = ["submit", values["ref"]]
    for flag, field in (
        ("--accelerator", "accelerator"),
        ("--args", "args"),
        ("--kwargs", "kwargs"),
        ("--name", "name"),
    ):
        if values.get(field) and not (field == "kwargs" and values[field] == "{}"):
            words += [flag, values[field]]
    return shlex.join(words)


def detail_text(job: JobSnapshot) -> str:
    """The selected job whole, however narrow its columns: name, function, placement and phase (its id and
    status have columns that are never cut)."""
    parts = [job.name or "-", job.func or "-", f"{job.accelerator or '-'} on {job.pool or '-'}"]
    if job.phase:
        parts.append(f"phase {job.phase}")
    return " · ".join(parts)


class JobsView(View):
    key = "2"
    title = "Jobs"
    ACTION_VERBS = {"submit": "submit", "cancel": "cancel"}
    LISTS_JOBS = True
    PRELOADS = True
    DEFAULT_CSS = "JobsView #jobs-detail { color: $text-muted; padding: 0 1; height: auto; max-height: 2; }"
    BINDINGS = [
        Binding("enter", "open", "Open", id="jobs.open"),
        Binding("s", "submit", "Submit", id="jobs.submit"),
        Binding("c", "cancel", "Cancel", id="jobs.cancel"),
        Binding("f", "next_failed", "Failed", id="jobs.next_failed"),
        Binding("o", "sort", "Sort", id="jobs.sort"),
        Binding("O", "reverse", "Reverse", show=False, id="jobs.reverse"),
        Binding("space", "mark", "Mark", show=False, id="jobs.mark"),
    ]

    def __init__(self) -> None:
        super().__init__(id="view-jobs")
        self._jobs: dict[str, JobSnapshot] = {}  # newest first, as the console lists them
        self._listed: tuple[JobSnapshot, ...] = ()  # the listing `_jobs` was made from
        self._batches: dict[str, str] = {}  # job id -> batch id, for a map's inputs
        self._members: dict[str, list[str]] = {}  # batch id -> its inputs, newest first
        self.expanded: set[str] = set()  # batches shown with their inputs
        self._now = 0.0
        self._query = ""
        self.sort_column: int | None = None  # None: newest first
        self.sort_reverse = False
        self._preloaded: tuple[tuple[JobSnapshot, ...], dict[str, str]] | None = None
        self._listed_all = False

    def compose(self) -> ComposeResult:
        yield Label("Jobs", classes="section", id="jobs-title")
        yield VirtualTable(COLUMNS, id="jobs")
        yield Label("", id="jobs-detail")

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#jobs", VirtualTable)

    async def preload(self) -> None:
        self._preloaded = await self.console.jobs.list_with_batches(limit=FIRST_PAGE)

    async def on_mount(self) -> None:
        if self._preloaded is not None:
            await self._show(*self._preloaded)
            self._preloaded = None

    async def reload(self) -> None:
        """The first load shows the newest page (unless the preload did) and then the whole list: listing
        every job of a big workspace takes a while, and the operator looks at the newest ones first. The
        whole listing waits until the page is drawn: its thread holds the GIL, which the event loop must
        win back on each of the turns a frame takes."""
        if not self._listed_all:
            if not self._jobs:
                await self._show(*await self.console.jobs.list_with_batches(limit=FIRST_PAGE))
            await self.wait_for_refresh()
        await self._show(*await self.console.jobs.list_with_batches())
        self._listed_all = True

    async def _show(self, jobs: tuple[JobSnapshot, ...], batches: dict[str, str]) -> None:
        self._now = self.host.now()
        if jobs is not self._listed:  # the console hands the same listing back while nothing changed
            self._listed = jobs
            self._jobs = {job.job_id: job for job in jobs}
        self._batches = batches
        self._redraw()

    def _row(self, key: str) -> Row:
        members = self._members.get(key)
        if members is not None:
            return batch_row(key, [self._jobs[job_id] for job_id in members], self._now, key in self.expanded)
        row = job_row(self._jobs[key], self._now)
        return member_row(row) if key in self._batches and self._grouped else row

    @property
    def _grouped(self) -> bool:
        """Batches are rows of their own only in the newest-first list."""
        return not self._query and self.sort_column is None

    def _redraw(self) -> None:
        if self._query or self.sort_column is not None:
            rows = filter_rows(map(self._row, self._jobs), self._query)
            if self.sort_column is not None:
                rows = sort_rows(rows, self.sort_column, self.sort_reverse)
            keys = [row[0] for row in rows]
            self._members = {}
        else:
            keys, self._members = group_keys(self._jobs, self._batches, self.expanded)
        self.table.set_rows(keys, self._row)
        order = (
            "newest first"
            if self.sort_column is None
            else f"by {COLUMNS[self.sort_column][0].lower()} {'↓' if self.sort_reverse else '↑'}"
        )
        shown = f"{len(keys)}/{len(self._jobs)} match {self._query!r}" if self._query else str(len(keys))
        marked = f" · {len(self.table.marked)} marked" if self.table.marked else ""
        self.query_one("#jobs-title", Label).update(f"Jobs · {shown} · {order}{marked}")
        self._show_detail()

    def _show_detail(self) -> None:
        key = self.table.selected_key or ""
        job, members = self._jobs.get(key), self._members.get(key)
        if members is not None:
            text = batch_detail(key, [self._jobs[job_id] for job_id in members])
        else:
            text = "" if job is None else detail_text(job)
        self.query_one("#jobs-detail", Label).update(text)

    @on(VirtualTable.Highlighted, "#jobs")
    def _highlighted(self, event: VirtualTable.Highlighted) -> None:
        event.stop()
        self._show_detail()

    @on(VirtualTable.MarksChanged, "#jobs")
    def _marks_changed(self, event: VirtualTable.MarksChanged) -> None:
        event.stop()
        self._redraw()

    def filter(self, query: str) -> None:
        self._query = query
        self._redraw()

    def reveal(self, name: str) -> None:
        batch = self._batches.get(name)
        if batch is not None and batch not in self.expanded and self._grouped:
            self.expanded.add(batch)  # an input of a collapsed batch: open the batch to show it
            self._redraw()
        if self.table.select_key(name):
            self.table.focus()

    def _toggle(self, batch: str) -> None:
        self.expanded.symmetric_difference_update({batch})
        self._redraw()

    def action_sort(self) -> None:
        """Cycle newest-first -> each column -> newest-first."""
        following = 0 if self.sort_column is None else self.sort_column + 1
        self.sort_column = following if following < len(COLUMNS) else None
        self._redraw()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._redraw()

    def action_open(self) -> None:
        key = self.table.selected_key
        if key is not None:
            self._open(key)

    def _open(self, key: str) -> None:
        """A job opens its screen; a batch expands or collapses in place."""
        if key in self._members:
            self._toggle(key)
        else:
            self.host.open_job(key)

    @on(VirtualTable.Selected, "#jobs")
    def _selected(self, event: VirtualTable.Selected) -> None:
        event.stop()
        self._open(event.key)

    async def action_submit(self) -> None:
        """The form, its MODULE:FUNC completing from the functions the workspace knows (every one that has
        run here, and the saved submissions)."""
        try:
            known = tuple(function.ref for function in await self.console.jobs.known_functions())
        except KineticError:
            known = ()
        ref = replace(SUBMIT_FORM[0], suggestions=known, placeholder=known[0] if known else SUBMIT_FORM[0].placeholder)
        self.run_after_form("Submit a job", (ref, *SUBMIT_FORM[1:]), submit_line)

    def action_mark(self) -> None:
        self.table.action_mark()

    def action_next_failed(self) -> None:
        """The cursor to the next FAILED row below it, wrapping round to the top."""
        keys = self.table.keys
        start = self.table.cursor_row
        order = keys[start + 1 :] + keys[: start + 1]
        found = next((key for key in order if key in self._jobs and self._jobs[key].status == JobStatus.FAILED), None)
        if found is None:
            self.notify("no failed job in the list", severity="warning")
            return
        self.table.select_key(found)
        self.table.focus()

    def _targets(self) -> list[str]:
        """The marked jobs, in list order, or the selected one when nothing is marked; a batch stands for
        its inputs."""
        marked = self.table.marked
        if marked:
            keys = [key for key in self.table.keys if key in marked]
        else:
            selected = self.table.selected_key
            keys = [] if selected is None else [selected]
        jobs: list[str] = []
        for key in keys:
            jobs += [job for job in self._members.get(key, [key]) if job not in jobs]
        return jobs

    def _cancellable(self) -> tuple[list[str], list[str]]:
        """(the targets that can be cancelled, those already finished)."""
        ready: list[str] = []
        done: list[str] = []
        for key in self._targets():
            job = self._jobs.get(key)
            if job is not None:
                (done if JobStatus(job.status).finished else ready).append(key)
        return ready, done

    def why_not(self, action: str) -> str | None:
        if action == "open" and self.table.selected_key is None:
            return "no job selected"
        if action != "cancel":
            return None
        ready, done = self._cancellable()
        if ready:
            return None
        if not done:
            return "no job selected"
        if len(done) == 1:
            return (
                f"job {done[0]} is already {self._jobs[done[0]].status}; only PENDING or RUNNING jobs can be cancelled"
            )
        return f"none of the {len(done)} marked jobs is PENDING or RUNNING"

    def action_cancel(self) -> None:
        """One confirmation for every target; finished ones are named and left alone."""
        reason = self.why_not("cancel")
        if reason is not None:
            self.notify(reason, severity="warning")
            return
        ready, done = self._cancellable()
        if len(ready) == 1:
            question = f"Cancel job {ready[0]} ({self._jobs[ready[0]].name or '-'})?"
        else:
            named = ", ".join(ready[:SHOWN_IN_QUESTION])
            more = f" and {len(ready) - SHOWN_IN_QUESTION} more" if len(ready) > SHOWN_IN_QUESTION else ""
            question = f"Cancel {len(ready)} jobs ({named}{more})?"
        if done:
            question += f" {len(done)} already finished stay as they are."

        def answered(yes: bool | None) -> None:
            if yes:
                for job_id in ready:
                    self.host.run_command(f"cancel {job_id}")
                self.table.marked.clear()
                self._redraw()

        self.app.push_screen(ConfirmScreen(question), answered)
