"""The endpoints view: instances vs desired vs concurrency over ticks, and the model cache in LRU order.

One column per `ScalingEvent`: the instance count as a █ bar, the desired count as a ─ mark (┼ where it
falls inside the bar, i.e. a scale-in that has not happened yet), the decision on a marks row (↑ scale
out, ↓ scale in, H hold, r reconfigure) and concurrency as a sparkline row. Marks are letters and arrows,
not colours, so holds and scale decisions read under NO_COLOR.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from rich.text import Text

from kinetic_tui.core.validation import require_int
from kinetic_tui.render.formatting import fit, percent, sparkline, wrap_pieces

BAR, DESIRED, DESIRED_IN_BAR = "█", "─", "┼"
ACTION_MARKS = {"none": " ", "scale_out": "↑", "scale_in": "↓", "hold": "H", "reconfigure": "r"}
ACTION_STYLES = {"scale_out": "bold green", "scale_in": "bold cyan", "hold": "bold yellow", "reconfigure": "magenta"}
LEGEND = (
    ("█", "instances", "green"),
    ("─", "desired", "yellow"),
    ("↑", "out", "bold green"),
    ("↓", "in", "bold cyan"),
    ("H", "hold", "bold yellow"),
    ("r", "reconfigure", "magenta"),
)
MIN_PLOT = 8  # columns of events at the least


class ScalingEventLike(Protocol):
    """The fields of one scaling decision that the chart reads: a `ScalingEventSnapshot`, or the
    autoscaler's own event in tests."""

    @property
    def tick(self) -> float | None: ...

    @property
    def concurrency(self) -> float: ...

    @property
    def desired(self) -> int: ...

    @property
    def instance_count(self) -> int: ...

    @property
    def action(self) -> str: ...


def _tick_label(tick: float | None) -> str:
    return "" if tick is None else f"{tick:g}"


def render_scaling_chart(
    history: Sequence[ScalingEventLike], height: int = 10, width: int = 72, max_instances: int | None = None
) -> Text:
    """The last events that fit in `width` cells (axis included). `height` caps the plot rows; with
    `max_instances` (the endpoint's bound, default: the highest count seen) at most `height` each row is
    one instance, otherwise rows are scaled. Events with tick None (a reconfigure before any observation)
    get a column but no tick label."""
    require_int("height", height, 1)
    if max_instances is not None:
        require_int("max_instances", max_instances, 1)
    if not history:
        require_int("width", width, 1)
        return Text(fit("no scaling events yet", width), style="dim")
    top = max_instances or max(max(e.instance_count, e.desired) for e in history)
    axis = len(f"{top:g}") + 2  # "10 ┤"
    require_int("width", width, axis + MIN_PLOT)
    events = list(history)[-(width - axis) :]
    rows = min(height, top)
    lines = [_plot_row(events, level, rows, top, axis) for level in range(rows, 0, -1)]
    lines.append(Text(" " * (axis - 1) + "└" + "─" * len(events)))
    marks = Text(" " * axis)
    for event in events:
        marks.append(ACTION_MARKS.get(event.action, "?"), style=ACTION_STYLES.get(event.action, ""))
    lines.append(marks)
    lines.append(Text(" " * axis + _tick_axis([_tick_label(e.tick) for e in events]), style="dim"))
    peak = max(e.concurrency for e in events)
    spark = sparkline([e.concurrency for e in events], peak) if peak > 0 else "▁" * len(events)
    lines.append(Text("c".rjust(axis - 2) + " ┤" + spark, style="blue"))
    legend = [Text(f"{glyph} {word}", style=style) for glyph, word, style in LEGEND]
    legend.append(Text(f"c concurrency (peak {peak:g})", style="blue"))
    lines.extend(wrap_pieces(legend, width, sep="  "))
    return Text("\n").join(lines)


def _plot_row(events: list[ScalingEventLike], level: int, rows: int, top: int, axis: int) -> Text:
    """Row `level` (1 = bottom) covers counts above (level - 1) * top / rows up to level * top / rows."""
    threshold = level * top / rows
    label = f"{threshold:g}" if threshold == int(threshold) else ""
    line = Text()
    line.append(label.rjust(axis - 2) + " ┤", style="dim")
    for event in events:
        in_bar = event.instance_count * rows >= level * top
        desired_here = max(1, round(event.desired * rows / top)) == level
        if desired_here and event.desired != event.instance_count:
            line.append(DESIRED_IN_BAR if in_bar else DESIRED, style="bold yellow")
        elif in_bar:
            line.append(BAR, style="green")
        else:
            line.append(" ")
    return line


def _tick_axis(labels: list[str]) -> str:
    """Labels placed under their columns, left to right, skipping any that would touch the previous one."""
    cells = [" "] * len(labels)
    free = 0  # first column a new label may start at
    for column, label in enumerate(labels):
        if label and column >= free and column + len(label) <= len(cells):
            cells[column : column + len(label)] = label
            free = column + len(label) + 1
    return "".join(cells).rstrip()


class CacheTable(NamedTuple):
    rows: list[tuple[str, ...]]  # (rank, model, recency, loads, evictions), least-recently used first
    summary: str


def cache_rows(
    loaded: Sequence[str], load_events: Sequence[str], evict_events: Sequence[str], hits: int, misses: int
) -> CacheTable:
    """The multi-model cache as the endpoint holds it: rank 1 is the next eviction victim."""
    require_int("hits", hits, 0)
    require_int("misses", misses, 0)
    loads, evictions = Counter(load_events), Counter(evict_events)
    rows: list[tuple[str, ...]] = []
    for rank, name in enumerate(loaded, start=1):
        recency = "LRU (next out)" if rank == 1 and len(loaded) > 1 else ("MRU" if rank == len(loaded) else "")
        rows.append((str(rank), name, recency, str(loads[name]), str(evictions[name])))
    summary = (
        f"hit ratio {percent(hits, hits + misses, 1, 'n/a')} ({hits} hits, {misses} misses) · "
        f"{len(load_events)} loads · {len(evict_events)} evictions"
    )
    return CacheTable(rows, summary)
