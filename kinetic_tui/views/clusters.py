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
from textual.content import Content

from kinetic_tui.core.backends.kinds import kind
from kinetic_tui.core.profiles import DEFAULTS, current_profile_name, list_profiles
from kinetic_tui.render.tables import filter_rows, pool_row
from kinetic_tui.screens.dialogs import Field
from kinetic_tui.views.base import View
from kinetic_tui.widgets.virtual_table import Row, VirtualTable

REACHABLE = "✓ reachable"
NOT_CHECKED = "? not checked here"
POOLS_TITLE = "Pools (utilisation: last samples, in use now)"

POOL_FORM = (
    Field("name", "Name", placeholder="e.g. l4"),
    Field("accelerator", "Accelerator", placeholder="e.g. l4x2"),
    Field("nodes", "Nodes", "1"),
    Field("spot", "Spot", "false", switch=True),
)


def cluster_rows() -> list[Row]:
    """(profile, backend, cluster, reachability, current) for every profile."""
    current = current_profile_name()
    return [
        (
            p.name,
            p.backend,
            p.cluster or DEFAULTS["cluster"],
            REACHABLE if kind(p.backend).on_this_machine else NOT_CHECKED,
            "● current" if p.name == current else "",
        )
        for p in list_profiles()
    ]


def pool_add_line(values: dict[str, str]) -> str:
    """The form's answers as a `pool add` line: the parser, not the form, judges them."""
    words = ["pool", "add", values["name"], "--accelerator", values["accelerator"], "--nodes", values["nodes"]]
    return shlex.join(words) + (" --spot" if values.get("spot") == "true" else "")


class ClustersView(View):
    """The view the console opens on, so it is built for a cheap first frame: two `VirtualTable`s (small
    stylesheet, draw only the rows on screen) created empty and filled by the app's first refresh, each
    titled by its own top border rather than by a title widget: every widget on screen costs the first
    frame, and two DataTables cost it ~5 ms more than these two tables (against ~8 ms for a whole
    one-widget app)."""

    DEFAULT_CSS = """
    ClustersView VirtualTable {
        margin-top: 1;
        border-top: blank $foreground;
        border-title-style: bold;
    }
    ClustersView #clusters { height: auto; max-height: 7; }
    """
    key = "1"
    title = "Clusters"
    ACTION_VERBS = {"add_pool": "pool add", "remove_pool": "pool remove"}
    BINDINGS = [
        Binding("a", "add_pool", "Add pool", id="clusters.add_pool"),
        Binding("d", "remove_pool", "Remove pool", id="clusters.remove_pool"),
    ]

    def __init__(self) -> None:
        super().__init__(id="view-clusters")
        self._pools: list[Row] = []
        self._query = ""

    def compose(self) -> ComposeResult:
        clusters = VirtualTable(
            (("PROFILE", 14), ("BACKEND", 8), ("CLUSTER", 16), ("REACHABLE", 18), ("", 9)), id="clusters"
        )
        clusters.border_title = "Clusters (from profiles)"
        pools = VirtualTable(
            (("POOL", 12), ("ACCEL", 13), ("NODES", 5), ("USED", 4), ("QUEUE", 5), ("KIND", 9), ("UTILISATION", 17)),
            id="pools",
        )
        pools.border_title = POOLS_TITLE
        yield clusters
        yield pools

    @property
    def pools_table(self) -> VirtualTable:
        return self.query_one("#pools", VirtualTable)

    async def reload(self) -> None:
        clusters = await asyncio.to_thread(cluster_rows)
        pools = await self.console.pools.list()
        history = self.host.pool_history
        self._pools = [pool_row(pool, history.get(pool.name, ())) for pool in pools]
        self.query_one("#clusters", VirtualTable).sync(clusters)
        self._redraw()

    def _redraw(self) -> None:
        shown = filter_rows(self._pools, self._query)
        self.pools_table.sync(shown)
        suffix = f" · filter {self._query!r}: {len(shown)}/{len(self._pools)}" if self._query else ""
        # Content, not markup: the filter is whatever the user typed
        self.pools_table.border_title = Content(POOLS_TITLE + suffix)

    def filter(self, query: str) -> None:
        self._query = query
        self._redraw()

    def reveal(self, name: str) -> None:
        if self.pools_table.select_key(name):
            self.pools_table.focus()

    def action_add_pool(self) -> None:
        self.run_after_form("Add pool", POOL_FORM, pool_add_line)

    def action_remove_pool(self) -> None:
        name = self.pools_table.selected_key
        if name is None:
            self.notify("no pool selected", severity="warning")
            return
        self.run_if_confirmed(f"Remove pool {name}?", shlex.join(["pool", "remove", name]))
