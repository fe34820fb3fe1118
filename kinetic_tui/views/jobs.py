"""View 2, Jobs: every job newest first, with filter, sort, submit, cancel and the job screen.

Large lists: the table is windowed (`VirtualTable`). A reload hands it the job ids in order and a function
that renders one job's row, so with 10,000 jobs a poll costs one list of ids on the event loop and rows
are rendered only for the visible page (`benchmarks/bench_jobs_view.py`). A filter or a sort needs every
row's text, so only then is every row rendered on a reload.
"""

from __future__ import annotations

import shlex

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label

from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.render import filter_rows, job_row, sort_rows
from kinetic_tui.screens.dialogs import Field
from kinetic_tui.views.base import View
from kinetic_tui.widgets.virtual_table import Row, VirtualTable

FIRST_PAGE = 200  # rows of the first, fast listing: more than any terminal shows
COLUMNS = (("ID", 12), ("NAME", 14), ("ACCEL", 9), ("POOL", 6), ("STATUS", 11), ("AGE", 6), ("TOOK", 6))
SUBMIT_FORM = (
    Field("ref", "MODULE:FUNC", placeholder="pkg.module:func"),
    Field("accelerator", "Accelerator", "cpu"),
    Field("args", "Args (JSON list)", "[]"),
    Field("name", "Name", placeholder="optional"),
)


def submit_line(values: dict[str, str]) -> str:
    """The submit form's answers as a `submit` line; empty optional fields are left out."""
    words = ["submit", values["ref"]]
    for flag, field in (("--accelerator", "accelerator"), ("--args", "args"), ("--name", "name")):
        if values.get(field):
            words += [flag, values[field]]
    return shlex.join(words)


class JobsView(View):
    key = "2"
    title = "Jobs"
    ACTION_VERBS = {"submit": "submit", "cancel": "cancel"}
    LISTS_JOBS = True
    BINDINGS = [
        Binding("enter", "open", "Open", id="jobs.open"),
        Binding("s", "submit", "Submit", id="jobs.submit"),
        Binding("c", "cancel", "Cancel job", id="jobs.cancel"),
        Binding("o", "sort", "Sort", id="jobs.sort"),
        Binding("O", "reverse", "Reverse", show=False, id="jobs.reverse"),
    ]

    def __init__(self) -> None:
        super().__init__(id="view-jobs")
        self._jobs: dict[str, JobSnapshot] = {}  # newest first, as the console lists them
        self._now = 0.0
        self._query = ""
        self.sort_column: int | None = None  # None: newest first
        self.sort_reverse = False

    def compose(self) -> ComposeResult:
        yield Label("Jobs", classes="section", id="jobs-title")
        yield VirtualTable(COLUMNS, id="jobs")

    @property
    def table(self) -> VirtualTable:
        return self.query_one("#jobs", VirtualTable)

    async def reload(self) -> None:
        """The first load shows the newest page at once and then the whole list: listing every job of a
        big workspace takes a while, and the operator looks at the newest ones first."""
        if not self._jobs:
            await self._show(await self.console.jobs.list(limit=FIRST_PAGE))
        await self._show(await self.console.jobs.list())

    async def _show(self, jobs: tuple[JobSnapshot, ...]) -> None:
        self._now = self.host.now()
        self._jobs = {job.job_id: job for job in jobs}
        self._redraw()

    def _row(self, job_id: str) -> Row:
        return job_row(self._jobs[job_id], self._now)

    def _redraw(self) -> None:
        if self._query or self.sort_column is not None:
            rows = filter_rows(map(self._row, self._jobs), self._query)
            if self.sort_column is not None:
                rows = sort_rows(rows, self.sort_column, self.sort_reverse)
            keys = [row[0] for row in rows]
        else:
            keys = list(self._jobs)
        self.table.set_rows(keys, self._row)
        order = (
            "newest first"
            if self.sort_column is None
            else f"by {COLUMNS[self.sort_column][0].lower()} {'↓' if self.sort_reverse else '↑'}"
        )
        shown = f"{len(keys)}/{len(self._jobs)} match {self._query!r}" if self._query else str(len(keys))
        self.query_one("#jobs-title", Label).update(f"Jobs · {shown} · {order}")

    def filter(self, query: str) -> None:
        self._query = query
        self._redraw()

    def reveal(self, name: str) -> None:
        if self.table.select_key(name):
            self.table.focus()

    def action_sort(self) -> None:
        """Cycle newest-first -> each column -> newest-first."""
        following = 0 if self.sort_column is None else self.sort_column + 1
        self.sort_column = following if following < len(COLUMNS) else None
        self._redraw()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._redraw()

    def action_open(self) -> None:
        job_id = self.table.selected_key
        if job_id is not None:
            self.host.open_job(job_id)

    @on(VirtualTable.Selected, "#jobs")
    def _selected(self, event: VirtualTable.Selected) -> None:
        event.stop()
        self.host.open_job(event.key)

    def action_submit(self) -> None:
        self.run_after_form("Submit a job", SUBMIT_FORM, submit_line)

    def action_cancel(self) -> None:
        job_id = self.table.selected_key
        if job_id is None:
            self.notify("no job selected", severity="warning")
            return
        row = self.table.get_row(job_id)
        name, status = row[1], row[4].split()[-1]
        if JobStatus(status).finished:
            self.notify(
                f"job {job_id} is already {status}; only PENDING or RUNNING jobs can be cancelled", severity="warning"
            )
            return
        self.run_if_confirmed(f"Cancel job {job_id} ({name})?", f"cancel {job_id}")
