"""An endpoint's scaling history as a widget: `render.scaling_chart` at the current width, one column per
observation, so the newest events stay in view when the history outgrows the screen."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from kinetic_tui.core.console.snapshots import ScalingEventSnapshot
from kinetic_tui.render.scaling_chart import MIN_PLOT, render_scaling_chart

PLOT_ROWS = 6  # with the axis, marks, ticks, concurrency and legend rows the chart stays within 12 rows


class ScalingChart(Widget):
    DEFAULT_CSS = "ScalingChart { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: tuple[ScalingEventSnapshot, ...] = ()
        self.max_instances: int | None = None

    def show(self, history: Sequence[ScalingEventSnapshot], max_instances: int | None) -> None:
        history = tuple(history)
        if (history, max_instances) != (self.history, self.max_instances):
            self.history, self.max_instances = history, max_instances
            self.refresh(layout=True)

    def render(self) -> Text:
        top = max([self.max_instances or 1, *(max(e.instance_count, e.desired) for e in self.history)])
        width = max(self.size.width, len(str(top)) + 2 + MIN_PLOT)
        return render_scaling_chart(self.history, height=PLOT_ROWS, width=width, max_instances=top)
