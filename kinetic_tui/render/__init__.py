"""Pure renderers from core snapshots to rich Text and table rows, for the Textual screens to draw.

Nothing here imports textual or reads a clock (times are passed in), so every view's content is unit-tested
as plain text, fits 80 columns, and carries each status as a glyph as well as one of the 16 ANSI colours.
"""

from kinetic_tui.render.dag import render_dag, run_history_rows, step_rows
from kinetic_tui.render.formatting import (
    LOOKS,
    Look,
    humanize_age,
    humanize_duration,
    look,
    short_hash,
    status_cell,
    styled_cell,
)
from kinetic_tui.render.log_buffer import LogBuffer
from kinetic_tui.render.scaling_chart import CacheTable, cache_rows, render_scaling_chart
from kinetic_tui.render.stage_graph import PromoteTarget, history_rows, promote_targets, render_stage_graph
from kinetic_tui.render.tables import (
    endpoint_row,
    filter_rows,
    job_row,
    model_row,
    pipeline_row,
    pool_row,
    progress_bar,
    sort_rows,
    study_row,
    training_row,
    trial_row,
)

__all__ = [
    "LOOKS",
    "CacheTable",
    "LogBuffer",
    "Look",
    "PromoteTarget",
    "cache_rows",
    "endpoint_row",
    "filter_rows",
    "history_rows",
    "humanize_age",
    "humanize_duration",
    "job_row",
    "look",
    "model_row",
    "pipeline_row",
    "pool_row",
    "progress_bar",
    "promote_targets",
    "render_dag",
    "render_scaling_chart",
    "render_stage_graph",
    "run_history_rows",
    "short_hash",
    "sort_rows",
    "status_cell",
    "step_rows",
    "study_row",
    "styled_cell",
    "training_row",
    "trial_row",
]
