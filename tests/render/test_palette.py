"""Every renderer, drawn at 80 columns: only the 16 ANSI colours, and legible with NO_COLOR."""

import io

import pytest
from rich.console import Console
from rich.text import Text

from kinetic_tui.core.demo.canonical import canonical_pipeline
from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.registry import ModelVersion, Stage
from kinetic_tui.render.dag import render_dag
from kinetic_tui.render.formatting import styled_cell
from kinetic_tui.render.scaling_chart import render_scaling_chart
from kinetic_tui.render.stage_graph import render_stage_graph
from tests.render import widest

COLOURS = {"black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"}
ALLOWED = COLOURS | {f"bright_{c}" for c in COLOURS} | {"bold", "dim", "reverse", "italic", "underline"}


def _stage_graph() -> Text:
    stages = [Stage.NONE, Stage.STAGING, Stage.PRODUCTION, Stage.ARCHIVED]
    return render_stage_graph([ModelVersion("g", i + 1, "h", {}, None, s) for i, s in enumerate(stages)], selected=3)


def _dag() -> Text:
    pipeline = canonical_pipeline()
    run = pipeline.run({"threshold": 0.99})
    return render_dag(
        pipeline.layers(), pipeline.edges(), {n: r.status for n, r in run.steps.items()}, run.branch_taken
    )


def _chart() -> Text:
    endpoint = Endpoint("e")
    for tick, concurrency in enumerate([45, 5, 5, 5, 5, 5, 0, 0, 30]):
        endpoint.observe(concurrency, tick)
    return render_scaling_chart(endpoint.history)


@pytest.mark.parametrize("render", [_stage_graph, _dag, _chart, lambda: styled_cell("✗ FAILED")])
def test_sixteen_colours_and_no_color(render):
    text = render()
    assert widest(text) <= 80
    for span in text.spans:
        assert set(str(span.style).split()) <= ALLOWED, span
    out = io.StringIO()
    Console(file=out, width=80, no_color=True, force_terminal=True).print(text)
    drawn = out.getvalue()
    assert "\x1b[3" not in drawn and "\x1b[9" not in drawn  # no foreground colour codes at all


def test_status_boxes_are_not_dimmed_by_their_line():
    """A line's label style must not leak into the statuses drawn after it."""
    text = _dag()
    first = text.plain.index("[")
    assert all("dim" not in str(span.style) for span in text.spans if span.start <= first < span.end)
    assert not text.style
