"""View 6, Pipelines: the DAG of the selected pipeline in Kahn rounds, coloured and glyphed by the selected
run's step statuses with the branch taken and each running step's job id, the run history with each run's
status and duration, and the run's step outputs and cache keys. `R` reruns with param edits (a form with
one field per param), `c` cancels the selected run (confirmed), Enter on a step opens its job's screen.

Live: every poll re-reads the runs still Running (a settled run never changes), so the DAG follows the
driver's step changes as they are committed."""

from __future__ import annotations

import json
import shlex
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Label

from kinetic_tui.core.console.snapshots import PipelineRunSnapshot, PipelineSnapshot
from kinetic_tui.render.dag import run_history_rows, step_rows
from kinetic_tui.render.tables import pipeline_row
from kinetic_tui.views.forms import COMMANDS, ParamsForm, TableView, ViewBody
from kinetic_tui.widgets.dag_view import DagView
from kinetic_tui.widgets.keyed_table import KeyedTable


def _run_key(number: int) -> str:
    return f"#{number}"  # what run_history_rows puts in the key cell


def _in_pipeline_order(params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`params` in the order the pipeline declares its defaults (a recorded run's come back sorted), so the
    rerun form's first field is the pipeline author's first param; any others follow."""
    return {**{key: params[key] for key in defaults if key in params}, **params}


def _changed(params: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in params.items() if key not in defaults or defaults[key] != value}


class PipelinesView(TableView):
    key = "6"
    title = "Pipelines"
    MAIN = "pipelines"
    WHAT = "pipeline"
    BINDINGS = [
        Binding("R", "rerun", "Rerun", id="pipelines.rerun"),
        Binding("c", "cancel", "Cancel run", id="pipelines.cancel"),
    ]
    ACTION_VERBS = {"rerun": "rerun", "cancel": "pipeline cancel"}
    DEFAULT_CSS = "PipelinesView KeyedTable { max-height: 8; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipelines: dict[str, PipelineSnapshot] = {}
        # a recorded run never changes, so each one is fetched once
        self.runs: dict[tuple[str, int], PipelineRunSnapshot] = {}

    def compose(self) -> ComposeResult:
        with ViewBody():
            yield KeyedTable(
                [("pipeline", 14), ("ref", 26), ("steps", None), ("rounds", None), ("runs", None), ("last", None)],
                id="pipelines",
            )
            yield Label("DAG", id="dag-title", classes="section")
            yield DagView(id="dag")
            yield Label("Runs", classes="section")
            yield KeyedTable(
                [
                    ("run", None),
                    ("status", 11),
                    ("took", 6),
                    ("exec", None),
                    ("cached", None),
                    ("skip", None),
                    ("fail", None),
                    ("changed params", 24),
                ],
                id="runs",
            )
            yield Label("Steps", id="steps-title", classes="section")
            yield KeyedTable(
                [("step", 14), ("status", 11), ("time", None), ("cache key", 9), ("outputs", 30)], id="steps"
            )

    async def reload(self) -> None:
        pipelines = await self.console.pipelines.list()
        self.pipelines = {pipeline.name: pipeline for pipeline in pipelines}
        for pipeline in pipelines:
            for summary in pipeline.runs:  # a settled run never changes; a Running one is read again
                known = self.runs.get((pipeline.name, summary.run))
                if known is None or known.status == "Running":
                    self.runs[pipeline.name, summary.run] = await self.console.pipelines.get_run(
                        pipeline.name, summary.run
                    )
        self.show_rows([pipeline_row(pipeline) for pipeline in pipelines])

    def _current(self) -> PipelineSnapshot | None:
        return self.pipelines.get(self.main_table.selected_key or "")

    def show_selected(self) -> None:
        pipeline = self._current()
        if pipeline is None:
            return
        runs = [self.runs[pipeline.name, summary.run] for summary in pipeline.runs]
        table = self.query_one("#runs", KeyedTable)
        new_run = bool(runs) and _run_key(runs[-1].run) not in table.keys
        # only the params a run changed from the defaults: those are what tell runs apart in 80 columns
        table.sync(
            run_history_rows(
                ({**run.to_dict(), "params": _changed(run.params, pipeline.params)} for run in runs), self.host.now()
            )
        )
        if new_run:  # a run just landed (often the user's rerun): show it
            table.select_key(_run_key(runs[-1].run))
        self._show_run()

    def _selected_run(self) -> PipelineRunSnapshot | None:
        pipeline = self._current()
        key = self.query_one("#runs", KeyedTable).selected_key
        return None if pipeline is None or key is None else self.runs.get((pipeline.name, int(key.lstrip("#"))))

    def _show_run(self) -> None:
        pipeline = self._current()
        if pipeline is None:
            return
        run = self._selected_run()
        steps = () if run is None else run.steps
        self.query_one("#dag", DagView).show(
            pipeline.layers,
            pipeline.edges,
            {step.name: step.status for step in steps},
            {} if run is None else run.branch_taken,
            {step.name: step.job_id for step in steps if step.job_id},
        )
        self.query_one("#dag-title", Label).update(
            f"DAG of {pipeline.name}" + ("" if run is None else f", run #{run.run} (⑂ = branch taken)")
        )
        self.query_one("#steps-title", Label).update(
            "Steps (no runs yet)" if run is None else f"Steps of run #{run.run}: outputs and cache keys"
        )
        self.query_one("#steps", KeyedTable).sync([] if run is None else step_rows(run.to_dict()))

    @on(DataTable.RowHighlighted, "#runs")
    def run_chosen(self) -> None:
        self._show_run()

    @on(DataTable.RowSelected, "#steps")
    def step_chosen(self, event: DataTable.RowSelected) -> None:
        """Enter on a step: the screen of the job it runs or ran as (live log, then result or traceback)."""
        event.stop()
        run = self._selected_run()
        step = None if run is None else next((s for s in run.steps if s.name == event.row_key.value), None)
        if run is None or step is None:
            return
        if step.job_id is None:
            self.notify(f"step {step.name!r} of run #{run.run} ran no job ({step.status})", severity="warning")
            return
        self.host.open_job(step.job_id)

    def action_cancel(self) -> None:
        """Cancel the selected run (its running step jobs too), after asking; a settled run is refused here."""
        run = self._selected_run()
        if run is None:
            self.notify("no pipeline run selected", severity="warning")
            return
        if run.status != "Running":
            self.notify(
                f"run #{run.run} of {run.pipeline} already finished ({run.status}); only a Running run can be "
                "cancelled",
                severity="warning",
            )
            return
        name = shlex.quote(run.pipeline)
        self.run_if_confirmed(
            f"Cancel run #{run.run} of {run.pipeline} and its running step jobs?",
            f"pipeline cancel {name} --run {run.run}",
        )

    @work(exclusive=True, exit_on_error=False, group=COMMANDS)
    async def action_rerun(self) -> None:
        """The form starts from the last run's params, which is what `rerun` merges the edits over."""
        pipeline = self.pipelines.get(self.chosen_key() or "")
        if pipeline is None:
            return
        last = self.runs.get((pipeline.name, pipeline.runs[-1].run)) if pipeline.runs else None
        edits = await self.app.push_screen_wait(
            ParamsForm(
                f"Rerun {pipeline.name} with params:",
                pipeline.params if last is None else _in_pipeline_order(last.params, pipeline.params),
            )
        )
        if edits is None:
            return
        flags = " ".join(f"--param {shlex.quote(f'{key}={json.dumps(value)}')}" for key, value in edits.items())
        await self.run_to_end(f"rerun {shlex.quote(pipeline.name)} {flags}".rstrip())
