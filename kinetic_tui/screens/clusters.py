"""View 1, Clusters & pools: where work can run, and how busy each pool has been lately.

Clusters come from the profiles (a local profile is reachable by definition; a GKE cluster is not probed
from here, which would need credentials and a network round trip per poll). The utilisation history is
sampled by the app on every poll, so it keeps growing while another view is on screen.
"""
from __future__ import annotations

import asyncio
import shlex

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label

from core.profiles import DEFAULTS, current_profile_name, list_profiles
from kinetic_tui.render import filter_rows, pool_row
from kinetic_tui.screens.base import View
from kinetic_tui.widgets import KeyedTable, Row
from kinetic_tui.widgets.confirm import ConfirmScreen, Field, FormScreen

REACHABILITY = {"local": "✓ reachable"}
NOT_CHECKED = "? not checked here"

POOL_FORM = (Field("name", "Name", placeholder="e.g. l4"), Field("accelerator", "Accelerator", placeholder="e.g. l4x2"),
             Field("nodes", "Nodes", "1"), Field("spot", "Spot", "false", switch=True))


def cluster_rows() -> list[Row]:
    """(profile, backend, cluster, reachability, current) for every profile."""
    current = current_profile_name()
    return [(p.name, p.backend, p.cluster or DEFAULTS["cluster"], REACHABILITY.get(p.backend, NOT_CHECKED),
             "● current" if p.name == current else "") for p in list_profiles()]


def pool_add_line(values: dict[str, str]) -> str:
    """The form's answers as a `pool add` line: the parser, not the form, judges them."""
    words = ["pool", "add", values["name"], "--accelerator", values["accelerator"], "--nodes", values["nodes"]]
    return shlex.join(words) + (" --spot" if values.get("spot") == "true" else "")


class ClustersView(View):
    key = "1"
    title = "Clusters"
    MUTATING = frozenset({"add_pool", "remove_pool"})
    BINDINGS = [Binding("a", "add_pool", "Add pool"), Binding("d", "remove_pool", "Remove pool")]

    def __init__(self) -> None:
        super().__init__(id="view-clusters")
        self._pools: list[Row] = []
        self._query = ""

    def compose(self) -> ComposeResult:
        yield Label("Clusters (from profiles)", classes="section")
        yield KeyedTable((("PROFILE", 14), ("BACKEND", 8), ("CLUSTER", 16), ("REACHABLE", 18), ("", 9)),
                         id="clusters")
        yield Label("Pools", classes="section", id="pools-title")
        yield KeyedTable((("POOL", 12), ("ACCEL", 13), ("NODES", 5), ("USED", 4), ("QUEUE", 5), ("KIND", 9),
                          ("UTILISATION", 17)), id="pools")

    @property
    def pools_table(self) -> KeyedTable:
        return self.query_one("#pools", KeyedTable)

    async def reload(self) -> None:
        clusters = await asyncio.to_thread(cluster_rows)
        pools = await self.console.pools()
        history = getattr(self.app, "pool_history", {})
        self._pools = [pool_row(pool, history.get(pool.name, ())) for pool in pools]
        self.query_one("#clusters", KeyedTable).sync(clusters)
        self._redraw()

    def _redraw(self) -> None:
        shown = filter_rows(self._pools, self._query)
        self.pools_table.sync(shown)
        suffix = f" · filter {self._query!r}: {len(shown)}/{len(self._pools)}" if self._query else ""
        self.query_one("#pools-title", Label).update(f"Pools (utilisation: last samples, in use now){suffix}")

    def filter(self, query: str) -> None:
        self._query = query
        self._redraw()

    def reveal(self, name: str) -> None:
        if self.pools_table.select_key(name):
            self.pools_table.focus()

    def action_add_pool(self) -> None:
        def submitted(values: dict[str, str] | None) -> None:
            if values is not None:
                self.app.run_command(pool_add_line(values))  # type: ignore[attr-defined]

        self.app.push_screen(FormScreen("Add pool", POOL_FORM), submitted)

    def action_remove_pool(self) -> None:
        name = self.pools_table.selected_key
        if name is None:
            self.notify("no pool selected", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.run_command(shlex.join(["pool", "remove", name]))  # type: ignore[attr-defined]

        self.app.push_screen(ConfirmScreen(f"Remove pool {name}?"), answered)
