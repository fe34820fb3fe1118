"""The pipelines view: the DAG drawn in Kahn rounds, per-step rows and the run history.

Each round is one band of `[glyph name]` boxes (wrapped onto more rows when it is wider than the screen),
followed by one `↳ producer → consumer, …` line per step of that round that feeds others. Listing the
fan-outs in words rather than drawing crossing lines keeps any DAG readable at 80 columns, including edges
that skip rounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.text import Text

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.pipelines import RunStatus, StepStatus
from kinetic_tui.core.validation import require_int
from kinetic_tui.render.formatting import (
    NONE_CELL,
    STEP_PENDING,
    fit,
    humanize_duration,
    look,
    short_hash,
    status_cell,
    wrap_pieces,
)

LABEL_WIDTH = 4  # "L1  ", "L12 "
OUTPUTS_WIDTH = 40


def _step_box(name: str, status: str, branch: bool | None, job_id: str | None) -> Text:
    found = look(StepStatus, status)
    taken = "" if branch is None else f" ⑂{'true' if branch else 'false'}"
    running = f" {job_id}" if job_id and found.word == StepStatus.RUNNING.value else ""
    return Text(f"[{found.glyph} {name}{taken}{running}]", style=found.style)


def render_dag(
    layers: list[list[str]],
    edges: list[tuple[str, str]],
    statuses: Mapping[str, str],
    branch_taken: Mapping[str, bool],
    width: int = 80,
    jobs: Mapping[str, str] | None = None,
) -> Text:
    """Steps missing from `statuses` are drawn Pending (a run not started yet); condition steps that ran
    show the branch they took as ⑂true / ⑂false; a Running step shows the id of its job (from `jobs`), the
    one its log and result are under."""
    require_int("width", width, 2 * LABEL_WIDTH)
    known = {name for layer in layers for name in layer}
    dangling = [edge for edge in edges if edge[0] not in known or edge[1] not in known]
    if dangling:
        raise ValidationError(
            f"edges: {dangling[0][0]} → {dangling[0][1]} names a step that is in no layer; "
            f"steps: {', '.join(sorted(known)) or 'none'}"
        )
    if not layers:
        return Text("(no steps)", style="dim")
    consumers: dict[str, list[str]] = {}
    for producer, consumer in sorted(edges):
        consumers.setdefault(producer, []).append(consumer)
    lines: list[Text] = []
    for number, layer in enumerate(layers, start=1):
        boxes = [
            _step_box(name, statuses.get(name, STEP_PENDING), branch_taken.get(name), (jobs or {}).get(name))
            for name in layer
        ]
        band = wrap_pieces(boxes, width - LABEL_WIDTH, sep=" ")
        for index, row in enumerate(band):
            label = f"L{number}" if index == 0 else ""
            line = Text()
            line.append(label.ljust(LABEL_WIDTH), style="dim")  # a span, not the line's base style
            lines.append(line.append_text(row))
        for producer in layer:
            if producer in consumers:
                lines.extend(_fan_out(producer, consumers[producer], width))
    return Text("\n").join(lines)


def _fan_out(producer: str, consumers: list[str], width: int) -> list[Text]:
    head = Text(" " * LABEL_WIDTH + f"↳ {producer} →", style="dim")
    pieces = [Text(name + ("," if i < len(consumers) - 1 else ""), style="dim") for i, name in enumerate(consumers)]
    indent = min(head.cell_len + 1, width // 2)
    return wrap_pieces([head, *pieces], width, indent=indent, sep=" ")


def _summary(values: Mapping[str, Any], width: int) -> str:
    """`k=v k=v` with each value's repr cut short: outputs can be whole datasets."""
    if not values:
        return NONE_CELL
    return fit(" ".join(f"{key}={fit(repr(value), 16)}" for key, value in sorted(values.items())), width)


def _steps(record: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, step) pairs from either shape the core hands out: `PipelineRun.to_record()` (a dict keyed by
    name) or `PipelineRunSnapshot.to_dict()` (a list of steps carrying their name)."""
    steps = record.get("steps")
    if isinstance(steps, Mapping):
        return list(steps.items())
    if isinstance(steps, list) and all(isinstance(step, Mapping) and "name" in step for step in steps):
        return [(step["name"], step) for step in steps]
    raise ValidationError(
        f"run record: field 'steps' must be a dict by name or a list of named steps, got {steps!r:.80}"
    )


def step_rows(run_record: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """(name, status, duration, cache key prefix, outputs or error) per step in topological order; the
    name is the row key. A condition step's outputs read `branch=True`, which is the branch it took."""
    rows: list[tuple[str, ...]] = []
    for name, step in _steps(run_record):
        status = look(StepStatus, step["status"])
        detail = (
            f"error: {fit(step['error'], OUTPUTS_WIDTH - 7)}"
            if step.get("error")
            else _summary(step.get("outputs") or {}, OUTPUTS_WIDTH)
        )
        rows.append(
            (name, status.cell, humanize_duration(step.get("duration", 0.0)), short_hash(step.get("cache_key")), detail)
        )
    return rows


# the settled outcomes a run's history row counts (the DAG shows every status, NotRun and Cancelled too)
HISTORY_COUNTS = (StepStatus.EXECUTED, StepStatus.CACHED, StepStatus.SKIPPED, StepStatus.FAILED)


def run_duration(record: Mapping[str, Any], now: float) -> str:
    """How long a run took, or has been running at `now`; "-" for a run recorded without its times."""
    started = record.get("started_at")
    if started is None:
        return NONE_CELL
    ended = record.get("finished_at")
    return humanize_duration(max((now if ended is None else ended) - started, 0.0))


def run_history_rows(runs: Iterable[Mapping[str, Any]], now: float = 0.0) -> list[tuple[str, ...]]:
    """(#run, status, duration, executed, cached, skipped, failed, params) per run; runs numbered from 1
    unless the record carries its own `run` number (console snapshots do). A Running run's duration is
    counted to `now`."""
    rows = []
    for number, record in enumerate(runs, start=1):
        counts: dict[str, int] = {}
        for _, step in _steps(record):
            word = look(StepStatus, step["status"]).word
            counts[word] = counts.get(word, 0) + 1
        rows.append(
            (
                f"#{record.get('run', number)}",
                status_cell(RunStatus, record["status"]),
                run_duration(record, now),
                *(str(counts.get(status.value, 0)) for status in HISTORY_COUNTS),
                _summary(record.get("params") or {}, OUTPUTS_WIDTH),
            )
        )
    return rows
