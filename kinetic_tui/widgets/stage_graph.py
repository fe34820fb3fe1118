"""The registry's stage graph as a widget: `render.stage_graph` drawn at the widget's current width."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from kinetic_tui.core.console.snapshots import ModelVersionSnapshot
from kinetic_tui.render.stage_graph import MIN_WIDTH, render_stage_graph


class StageGraph(Widget):
    """Redrawn on resize, so the boxes use the whole width the layout gives them."""

    DEFAULT_CSS = "StageGraph { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.versions: tuple[ModelVersionSnapshot, ...] = ()
        self.selected: int | None = None

    def show(self, versions: Sequence[ModelVersionSnapshot], selected: int | None) -> None:
        versions = tuple(versions)
        if (versions, selected) != (self.versions, self.selected):
            self.versions, self.selected = versions, selected
            self.refresh(layout=True)

    def render(self) -> Text:
        return render_stage_graph(list(self.versions), self.selected, width=max(self.size.width, MIN_WIDTH))
