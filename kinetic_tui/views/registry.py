"""View 4, Registry: every model version (newest first in each group), the stage graph of the selected
version's group (where each version sits, the allowed edges) and the group's transition history. `p`
promotes the selected version."""

from __future__ import annotations

import shlex
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label

from kinetic_tui.core.console.snapshots import GroupSnapshot, ModelVersionSnapshot
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.render.stage_graph import history_rows
from kinetic_tui.render.tables import model_row
from kinetic_tui.screens.dialogs import ConfirmScreen
from kinetic_tui.views.forms import COMMANDS, StagePicker, TableView, ViewBody
from kinetic_tui.widgets.keyed_table import KeyedTable
from kinetic_tui.widgets.stage_graph import StageGraph


def _key(model: ModelVersionSnapshot) -> str:
    return model_row(model)[0]  # GROUP:vN, the versions table's row key


class RegistryView(TableView):
    key = "4"
    title = "Registry"
    MAIN = "versions"
    WHAT = "model version"
    BINDINGS = [Binding("p", "promote", "Promote", id="registry.promote")]
    ACTION_VERBS = {"promote": "promote"}
    DEFAULT_CSS = "RegistryView KeyedTable { max-height: 8; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.groups: dict[str, GroupSnapshot] = {}
        self.versions: dict[str, ModelVersionSnapshot] = {}

    def compose(self) -> ComposeResult:
        with ViewBody():
            yield Label("Model versions", classes="section")
            yield KeyedTable(
                [("version", None), ("stage", None), ("artifact", 8), ("metrics", 16), ("source", 12)], id="versions"
            )
            yield Label("Stage graph", id="graph-title", classes="section")
            yield StageGraph(id="graph")
            yield Label("Transitions", id="history-title", classes="section")
            yield KeyedTable(
                [("#", None), ("version", None), ("from", None), ("to", None), ("at (UTC)", None)], id="history"
            )

    async def reload(self) -> None:
        groups = await self.console.registry.models()
        self.groups = {group.group: group for group in groups}
        self.versions = {_key(model): model for group in groups for model in reversed(group.versions)}
        self.show_rows([model_row(model) for model in self.versions.values()])

    def show_selected(self) -> None:
        model = self.versions.get(self.main_table.selected_key or "")
        group = None if model is None else self.groups[model.group]
        self.query_one("#graph", StageGraph).show(group.versions if group else (), model.version if model else None)
        self.query_one("#graph-title", Label).update(
            "Stage graph" if group is None else f"Stage graph of {group.group} (▸ = selected, ★ = Production)"
        )
        self.query_one("#history-title", Label).update(
            "Transitions" if group is None else f"Transitions of {group.group}"
        )
        self.query_one("#history", KeyedTable).sync(history_rows(group.history) if group else [])

    @work(exclusive=True, exit_on_error=False, group=COMMANDS)
    async def action_promote(self) -> None:
        model = self.versions.get(self.chosen_key() or "")
        if model is None:
            return
        target = await self.app.push_screen_wait(StagePicker(_key(model), model.stage, self._notes(model)))
        if target is None:
            return
        question = self._confirmation(model, target)
        if question and not await self.app.push_screen_wait(ConfirmScreen(question)):
            return
        await self.run_to_end(f"promote {shlex.quote(model.group)} {model.version} {target.value}")

    def _notes(self, model: ModelVersionSnapshot) -> dict[Stage, str]:
        """Promoting over the Production version takes it out of Production: the picker says so under the
        target, so choosing Production there is the confirmation."""
        production = self.groups[model.group].production
        if production in (None, model.version):
            return {}
        return {Stage.PRODUCTION: f"{model.group}:v{production} leaves Production and is Archived"}

    def _confirmation(self, model: ModelVersionSnapshot, target: Stage) -> str | None:
        """Archiving the Production version leaves its group without one: asked separately."""
        if model.stage == Stage.PRODUCTION and target is Stage.ARCHIVED:
            return f"Archive {_key(model)}, the Production version of {model.group}?"
        return None
