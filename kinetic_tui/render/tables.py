"""Row renderers for the console's tables, plus the `/` filter and column sort.

Every row is a tuple of plain strings whose first cell is the row's key (job id, pool name, `GROUP:vN`,
…), so a view can diff rows by key and update only the cells that changed (the Dolphie rule) instead of
clearing the table each refresh. Status cells are `glyph word`; `formatting.styled_cell` adds the colour
when drawing. Renderers take either a snapshot object or its `to_dict()`/`to_record()` form, because
the console hands out the former and `--script`/the store the latter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.pipelines import RunStatus
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.core.platform.training import TrainingStatus
from kinetic_tui.render.formatting import (
    NONE_CELL,
    fit,
    humanize_age,
    parse_humanized,
    percent,
    short_hash,
    sparkline,
    status_cell,
)

Row = tuple[str, ...]
SPARK_SAMPLES = 12
HP_WIDTH = 30


def _get(source: Any, name: str, default: Any = None) -> Any:
    """A field of a snapshot object or of its dict form."""
    if isinstance(source, Mapping):
        return source.get(name, default)
    return getattr(source, name, default)


def _metric(value: Any) -> str:
    if value is None:
        return NONE_CELL
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _pairs(values: Mapping[str, Any] | None, width: int = HP_WIDTH) -> str:
    if not values:
        return NONE_CELL
    return fit(" ".join(f"{key}={_metric(value)}" for key, value in sorted(values.items())), width)


# --- jobs and pools ---------------------------------------------------------------------------------


def job_row(row: Any, now: float) -> Row:
    """(id, name, accelerator, pool, status, age, duration) of a `JobSnapshot` (or its dict form). Duration
    runs from start to finish, or to `now` while running; "-" before the job starts."""
    name, accelerator = _get(row, "name", ""), _get(row, "accelerator", "")
    started, finished = _get(row, "started_at"), _get(row, "finished_at")
    duration = NONE_CELL if started is None else humanize_age(started, now if finished is None else finished)
    return (
        _get(row, "job_id"),
        name or NONE_CELL,
        accelerator or NONE_CELL,
        _get(row, "pool") or NONE_CELL,
        status_cell(JobStatus, _get(row, "status")),
        humanize_age(_get(row, "created_at"), now),
        duration,
    )


def pool_row(pool: Any, history: Sequence[int]) -> Row:
    """(name, accelerator, nodes, in use, queued, kind, utilisation) of a `PoolSnapshot` (or its dict form),
    where the utilisation cell is a sparkline of the last SPARK_SAMPLES in-use samples (scaled to the pool's
    nodes) and the share now."""
    kind = (
        " ".join(word for word, on in (("spot", _get(pool, "spot")), ("emulated", _get(pool, "emulated"))) if on)
        or NONE_CELL
    )
    nodes, in_use = _get(pool, "nodes"), _get(pool, "in_use")
    samples = list(history)[-SPARK_SAMPLES:]
    share = percent(in_use, nodes)
    util = f"{sparkline(samples, nodes)} {share}" if samples and nodes else share
    return (
        _get(pool, "name"),
        _get(pool, "accelerator"),
        str(nodes),
        str(in_use),
        str(_get(pool, "queued")),
        kind,
        util,
    )


# --- training and tuning ----------------------------------------------------------------------------


def progress_bar(done: int, total: int, width: int = 10) -> str:
    """`███░░ 3/5`: one cell per epoch up to `width`, scaled beyond."""
    if total < 1 or not 0 <= done <= total:
        raise ValidationError(f"progress: expected 0 <= done <= total and total >= 1, got {done}/{total}")
    cells = min(total, width)
    filled = done * cells // total
    return "█" * filled + "░" * (cells - filled) + f" {done}/{total}"


def _checkpoint_epoch(record: Any) -> int | None:
    """`TrainingSnapshot` carries `checkpoint_epoch`; `TrainingJob.to_record()` a `checkpoint` dict."""
    epoch: int | None = _get(record, "checkpoint_epoch")
    checkpoint = _get(record, "checkpoint")
    if epoch is None and checkpoint:
        epoch = checkpoint["epoch"]
    return epoch


def _latest_metric(record: Any) -> Any:
    """The final metric once Completed; before that the latest one reported (`last_metric` in a snapshot)
    or the checkpoint's, so a running or stopped training still shows how far it got."""
    for value in (_get(record, "metric"), _get(record, "last_metric")):
        if value is not None:
            return value
    checkpoint = _get(record, "checkpoint")
    return checkpoint.get("metric") if checkpoint else None


def training_row(record: Any) -> Row:
    """(name, status, epoch progress, checkpoint epoch, interruptions, metric, artifact hash)."""
    checkpoint = _checkpoint_epoch(record)
    return (
        _get(record, "name"),
        status_cell(TrainingStatus, _get(record, "status")),
        progress_bar(_get(record, "current_epoch"), _get(record, "max_epochs")),
        NONE_CELL if checkpoint is None else f"ckpt {checkpoint}",
        str(_get(record, "interruptions")),
        _metric(_latest_metric(record)),
        short_hash(_get(record, "artifact_hash")),
    )


def study_row(study: Any) -> Row:
    """(name, strategy, status, trials done/budget, best trial) of a `StudySnapshot` or its dict."""
    trials = list(_get(study, "trials") or ())
    best_id = _get(study, "best")
    best = next((t for t in trials if _get(t, "trial_id") == best_id), None)
    best_cell = NONE_CELL if best is None else f"#{best_id} {_metric(_get(best, 'metric'))}"
    done = sum(1 for t in trials if _get(t, "status") in (TrainingStatus.COMPLETED, TrainingStatus.FAILED))
    return (
        _get(study, "name"),
        _get(study, "strategy"),
        _get(study, "status"),
        f"{done}/{_get(study, 'budget')}",
        best_cell,
    )


def trial_row(trial: Any) -> Row:
    """(#id, hyperparameters, status, metric, artifact hash) of a `Trial`, `TrialSnapshot` or dict."""
    return (
        f"#{_get(trial, 'trial_id')}",
        _pairs(_get(trial, "hyperparameters")),
        status_cell(TrainingStatus, _get(trial, "status")),
        _metric(_get(trial, "metric")),
        short_hash(_get(trial, "artifact_hash")),
    )


# --- registry, endpoints, pipelines -----------------------------------------------------------------


def model_row(version: Any) -> Row:
    """(GROUP:vN, stage, artifact hash, metrics, source) of a `ModelVersion` or its snapshot."""
    return (
        f"{_get(version, 'group')}:v{_get(version, 'version')}",
        status_cell(Stage, _get(version, "stage")),
        short_hash(_get(version, "artifact_hash")),
        _pairs(_get(version, "metrics")),
        _get(version, "source") or NONE_CELL,
    )


def endpoint_row(endpoint: Any) -> Row:
    """(name, model group, instances min..max, target, last decision, loaded/max, hit ratio) of an
    `EndpointSnapshot` or its dict."""
    history = _get(endpoint, "history") or ()
    last = _get(history[-1], "action") if history else NONE_CELL
    hits, misses = _get(endpoint, "hits"), _get(endpoint, "misses")
    ratio = percent(hits, hits + misses)
    bounds = f"{_get(endpoint, 'min_instances')}..{_get(endpoint, 'max_instances')}"
    return (
        _get(endpoint, "name"),
        _get(endpoint, "model_group"),
        f"{_get(endpoint, 'instance_count')} ({bounds})",
        _metric(_get(endpoint, "target_per_instance")),
        last,
        f"{len(_get(endpoint, 'loaded') or ())}/{_get(endpoint, 'max_loaded_models')}",
        ratio,
    )


def pipeline_row(pipeline: Any) -> Row:
    """(name, ref, steps, rounds, runs, last run status) of a `PipelineSnapshot` or its dict."""
    layers = _get(pipeline, "layers") or ()
    runs = _get(pipeline, "runs") or ()
    last = status_cell(RunStatus, _get(runs[-1], "status")) if runs else NONE_CELL
    return (
        _get(pipeline, "name"),
        _get(pipeline, "ref"),
        str(sum(len(layer) for layer in layers)),
        str(len(layers)),
        str(len(runs)),
        last,
    )


# --- filter and sort --------------------------------------------------------------------------------


def filter_rows(rows: Iterable[Row], query: str) -> list[Row]:
    """The `/` filter: rows where any cell contains `query`, ignoring case; an empty query keeps all."""
    needle = query.strip().casefold()
    return [row for row in rows if not needle or any(needle in cell.casefold() for cell in row)]


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?", re.IGNORECASE)


def _sort_key(cell: str) -> tuple[int, float, str]:
    """Durations and numbers by value (so "10s" sorts after "3s" and "2m05s" after both), text by
    case-folded text; numbers before text so a column of either sorts sensibly."""
    seconds = parse_humanized(cell)
    if seconds is not None:
        return (0, seconds, "")
    if _NUMBER.fullmatch(cell):
        return (0, float(cell.rstrip("%")), "")
    return (1, 0.0, cell.casefold())


def sort_rows(rows: Iterable[Row], column: int, reverse: bool = False) -> list[Row]:
    """Stable sort on one column; rows with no value there ("-") stay last in either direction."""
    rows = list(rows)
    width = min((len(row) for row in rows), default=column + 1)
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < width:
        raise ValidationError(f"column: expected an index in 0..{width - 1}, got {column!r}")
    present = [row for row in rows if row[column] not in ("", NONE_CELL)]
    missing = [row for row in rows if row[column] in ("", NONE_CELL)]
    return sorted(present, key=lambda row: _sort_key(row[column]), reverse=reverse) + missing
