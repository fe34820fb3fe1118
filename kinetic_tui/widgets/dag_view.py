"""A pipeline's DAG as a widget: `render.dag` (Kahn rounds, status glyphs and colours) at the current width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.widget import Widget

from kinetic_tui.render.dag import LABEL_WIDTH, render_dag

# (layers, edges, step statuses, branches taken, step job ids), frozen so a redraw happens only when one
# changed
Drawing = tuple[
    tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...], dict[str, str], dict[str, bool], dict[str, str]
]


class DagView(Widget):
    DEFAULT_CSS = "DagView { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.drawing: Drawing = ((), (), {}, {}, {})

    def show(
        self,
        layers: Sequence[Sequence[str]],
        edges: Sequence[tuple[str, str]],
        statuses: Mapping[str, str],
        branch_taken: Mapping[str, bool],
        jobs: Mapping[str, str] | None = None,
    ) -> None:
        """`statuses` are the selected run's step statuses (empty: every step Pending); `jobs` its steps'
        job ids (a Running step shows its own)."""
        drawing: Drawing = (
            tuple(tuple(layer) for layer in layers),
            tuple((source, target) for source, target in edges),
            dict(statuses),
            dict(branch_taken),
            dict(jobs or {}),
        )
        if drawing != self.drawing:
            self.drawing = drawing
            self.refresh(layout=True)

    def render(self) -> Text:
        layers, edges, statuses, branch_taken, jobs = self.drawing
        return render_dag(
            [list(layer) for layer in layers],
            list(edges),
            statuses,
            branch_taken,
            width=max(self.size.width, 2 * LABEL_WIDTH),
            jobs=jobs,
        )
