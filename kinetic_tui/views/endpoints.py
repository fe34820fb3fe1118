"""View 5, Endpoints: the selected endpoint's config, where it serves with its router's and instances' pids
and what the router measures live (in flight, requests/s, p50/p99, errors), its scaling chart (instances vs
desired vs concurrency per tick, holds marked) and its multi-model cache in LRU order with load times. `S`
rescales, `l` drives a load pattern of real requests."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label, Static

from kinetic_tui.core.console.snapshots import EndpointSnapshot
from kinetic_tui.render.formatting import fit
from kinetic_tui.render.scaling_chart import cache_rows
from kinetic_tui.render.tables import endpoint_row
from kinetic_tui.screens.dialogs import Field, FormScreen
from kinetic_tui.views.forms import COMMANDS, TableView, ViewBody
from kinetic_tui.widgets.keyed_table import KeyedTable
from kinetic_tui.widgets.scaling_chart import ScalingChart

RECENT_EVENTS = 6  # cache load/evict events shown; the counts per model are in the cache table
LOAD_TICKS = 5


def _config(endpoint: EndpointSnapshot) -> str:
    return (
        f"{endpoint.name} serves {endpoint.model_group} · instances {endpoint.instance_count} "
        f"(min {endpoint.min_instances}, max {endpoint.max_instances}) · target {endpoint.target_per_instance:g}"
        f"/instance · cooldown out {endpoint.scale_out_cooldown:g} in {endpoint.scale_in_cooldown:g} · "
        f"tick {'-' if endpoint.last_tick is None else f'{endpoint.last_tick:g}'}"
    )


def _events(endpoint: EndpointSnapshot) -> str:
    def recent(names: Sequence[str]) -> str:
        return fit(" ".join(names[-RECENT_EVENTS:]), 60) if names else "-"

    serving = endpoint.serving or {}
    timed = [e for e in serving.get("cache_events", ()) if e.get("kind") == "load"][-RECENT_EVENTS:]
    load_times = " ".join(f"{e['model']} {1000 * e['seconds']:.1f}ms" for e in timed) or "-"
    return (
        f"recent loads: {recent(endpoint.load_events)}\nrecent evictions: {recent(endpoint.evict_events)}\n"
        f"load times: {fit(load_times, 60)}"
    )


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}ms"


def _instance(row: Mapping[str, Any]) -> str:
    state = "" if row["state"] == "ready" else f" ({row['state']})"
    return f"{row['instance']}:{row['pid'] or '-'}{state}"


def _serving(endpoint: EndpointSnapshot) -> str:
    """Where it listens, its processes and what its router measures now."""
    serving = endpoint.serving
    if serving is None:
        return "not served over HTTP (created before endpoints served)"
    if serving.get("cluster"):
        return _on_cluster(serving)
    instances = " ".join(_instance(row) for row in serving["instances"])
    head = (
        f"{serving['wanted']} · {serving['url']} · pool {serving['pool']} · router pid {serving['router_pid'] or '-'}"
        f"\ninstances (pid): {instances or '-'}"
    )
    live = serving.get("live")
    if live:
        head += (
            f"\nin flight {live['in_flight']} · {live['requests_per_second']:g} req/s · p50 {_ms(live['p50_ms'])} "
            f"· p99 {_ms(live['p99_ms'])} · errors {live['errors']} · rejected {live['rejected']}"
        )
    if serving.get("last_hold"):
        head += f"\nlast hold: {serving['last_hold']}"
    return head


def _on_cluster(serving: Mapping[str, Any]) -> str:
    """An endpoint a cluster serves: its objects and the replica counts the cluster reports."""
    if serving.get("error"):
        return f"{serving['wanted']} · served on {serving['cluster']} · the cluster cannot say: {serving['error']}"
    replicas, scaler = serving.get("replicas") or {}, serving.get("autoscaler") or {}
    objects = ", ".join(serving.get("objects") or ()) or "none (stopped)"
    counts = (
        f"replicas {replicas.get('ready', 0)} ready / {replicas.get('created', 0)} created / "
        f"{replicas.get('wanted', 0)} wanted · autoscaler current {scaler.get('current', 0)} "
        f"desired {scaler.get('desired', 0)}"
        if replicas
        else "no replicas"
    )
    where = f"{serving['wanted']} · served on {serving['cluster']} · {serving.get('url') or '-'}"
    return f"{where}\nobjects: {objects} · {counts}"


def _flags(values: Mapping[str, str]) -> str:
    """`--name value` for each filled-in field; the parser checks the values and names a bad one."""
    return " ".join(f"--{name} {shlex.quote(text)}" for name, text in values.items() if text)


class EndpointsView(TableView):
    key = "5"
    title = "Endpoints"
    MAIN = "endpoints"
    WHAT = "endpoint"
    BINDINGS = [Binding("S", "scale", "Scale", id="endpoints.scale"), Binding("l", "load", "Load", id="endpoints.load")]
    ACTION_VERBS = {"scale": "scale", "load": "load"}
    DEFAULT_CSS = """
    EndpointsView KeyedTable { max-height: 6; }
    EndpointsView Static { padding: 0 1; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.endpoints: dict[str, EndpointSnapshot] = {}

    def compose(self) -> ComposeResult:
        with ViewBody():
            yield KeyedTable(
                [
                    ("endpoint", 14),
                    ("model", 12),
                    ("instances", None),
                    ("target", None),
                    ("last", None),
                    ("loaded", None),
                    ("hits", None),
                ],
                id="endpoints",
            )
            yield Static("no endpoints yet: endpoint create NAME --model GROUP", id="config")
            yield Static("", id="serving")
            yield Label("Scaling: instances vs desired vs concurrency per tick", classes="section")
            yield ScalingChart(id="chart")
            yield Label("Model cache, least recently used first", classes="section")
            # The hit ratio and events sit above the table, not under it: at 80x24 they are below the fold, and
            # focusing the table (Tab) scrolls it to the middle of the view, which shows what is just above it,
            # however many rows the table grows to.
            yield Static("", id="cache-summary")
            yield KeyedTable(
                [("#", None), ("model", None), ("recency", None), ("loads", None), ("evictions", None)], id="cache"
            )

    async def reload(self) -> None:
        endpoints = await self.console.endpoints.list()
        self.endpoints = {endpoint.name: endpoint for endpoint in endpoints}
        selected = self.main_table.selected_key if self.is_mounted else None
        if selected in self.endpoints:  # the selected one with its router's live measurements
            self.endpoints[selected] = await self.console.endpoints.get(selected)
        self.show_rows([endpoint_row(endpoint) for endpoint in endpoints])

    def _current(self) -> EndpointSnapshot | None:
        return self.endpoints.get(self.main_table.selected_key or "")

    def show_selected(self) -> None:
        endpoint = self._current()
        if endpoint is None:
            return
        self.query_one("#config", Static).update(_config(endpoint))
        self.query_one("#serving", Static).update(_serving(endpoint))
        self.query_one("#chart", ScalingChart).show(endpoint.history, endpoint.max_instances)
        cache = cache_rows(endpoint.loaded, endpoint.load_events, endpoint.evict_events, endpoint.hits, endpoint.misses)
        self.query_one("#cache", KeyedTable).sync(cache.rows)
        self.query_one("#cache-summary", Static).update(f"{cache.summary}\n{_events(endpoint)}")

    def action_scale(self) -> None:
        endpoint = self.endpoints.get(self.chosen_key() or "")
        if endpoint is not None:
            self._ask(
                "scale",
                endpoint.name,
                [  # max first: the bound an operator changes most, focused with its value selected
                    Field("max", "max instances", str(endpoint.max_instances)),
                    Field("min", "min instances", str(endpoint.min_instances)),
                    Field("target", "target per instance", f"{endpoint.target_per_instance:g}"),
                ],
            )

    def action_load(self) -> None:
        endpoint = self.endpoints.get(self.chosen_key() or "")
        if endpoint is not None:  # default: twice what the instances absorb now, so the autoscaler has work
            self._ask(
                "load",
                endpoint.name,
                [
                    Field(
                        "concurrency",
                        "requests in flight",
                        f"{2 * endpoint.instance_count * endpoint.target_per_instance:g}",
                    ),
                    Field("ticks", "ticks", str(LOAD_TICKS)),
                ],
            )

    @work(exclusive=True, exit_on_error=False, group=COMMANDS)
    async def _ask(self, verb: str, name: str, fields: list[Field]) -> None:
        """Ask for `verb`'s flags (prefilled from the endpoint), then run it."""
        values = await self.app.push_screen_wait(FormScreen(f"{verb.capitalize()} {name}", fields))
        if values is not None:
            await self.run_to_end(f"{verb} {shlex.quote(name)} {_flags(values)}")
