"""The registry view's stage graph: four stage boxes, the allowed edges as arrows, the versions in each.

The arrows are read from `ALLOWED_TRANSITIONS` (not drawn by hand), so the picture cannot drift from the
rules `transition` enforces; `promote_targets` explains the same rules in words for the promote dialog.
Layout: None, Staging and Production side by side (each adjacent pair joined by → / ← arrows), Archived as
a wide box underneath joined to each of them by ▲ / ▼ arrows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from rich.text import Text

from kinetic_tui.core.platform.registry import ALLOWED_TRANSITIONS, Stage, parse_stage
from kinetic_tui.core.validation import require_int
from kinetic_tui.render.formatting import look, wrap_pieces


class VersionLike(Protocol):
    """Read-only, so a frozen snapshot whose stage is a plain `str` fits as well as a `ModelVersion`."""

    @property
    def version(self) -> int: ...
    @property
    def stage(self) -> Stage | str: ...


TOP_ROW = (Stage.NONE, Stage.STAGING, Stage.PRODUCTION)
BOTTOM = Stage.ARCHIVED
GAP = 6  # cells between two top boxes: room for " ───► "
MAX_VERSION_LINES = 3  # per box; the rest collapse into "+N more" so the graph fits in 24 rows
SELECTED_MARK = "▸"  # the selected version reads as selected without colour
# every top box must hold its title ("★ Production") between "│ " and " │"
MIN_WIDTH = len(TOP_ROW) * (max(len(look(Stage, stage).cell) for stage in Stage) + 4) + (len(TOP_ROW) - 1) * GAP


def _gap(right: bool, left: bool, row: int) -> str:
    """Connector cells between two boxes: row 0 carries →, row 1 carries ←."""
    if row == 0 and right:
        return " ───► "
    if row == 1 and left:
        return " ◄─── "
    return " " * GAP


def _version_tokens(versions: Iterable[VersionLike], stage: Stage, selected: int | None) -> list[Text]:
    tokens = []
    for model in sorted((m for m in versions if parse_stage(m.stage) is stage), key=lambda m: m.version):
        chosen = model.version == selected
        style = ("reverse " if chosen else "") + ("bold" if stage is Stage.PRODUCTION else "")
        tokens.append(Text(f"{SELECTED_MARK if chosen else ''}v{model.version}", style=style.strip()))
    return tokens


def _version_lines(tokens: list[Text], inner: int) -> list[Text]:
    """Version tokens wrapped into `inner` cells; past MAX_VERSION_LINES the tail becomes "+N more" and
    the selected version moves to the front, so the version being acted on is never hidden."""
    if not tokens:
        return [Text("(empty)", style="dim")]
    lines = wrap_pieces(tokens, inner, sep=" ")
    if len(lines) <= MAX_VERSION_LINES:
        return lines
    tokens = sorted(tokens, key=lambda token: not token.plain.startswith(SELECTED_MARK))
    kept = sum(len(line.plain.split()) for line in lines[:MAX_VERSION_LINES])
    while True:  # drop tokens until the "+N more" marker fits too (one or two passes in practice)
        more = Text(f"+{len(tokens) - kept} more", style="dim")
        lines = wrap_pieces([*tokens[:kept], more], inner, sep=" ")
        if len(lines) <= MAX_VERSION_LINES:
            return lines
        kept -= 1


def _box(stage: Stage, content: list[Text], width: int, height: int) -> list[Text]:
    """A rounded box `width` cells wide with `height` content rows (title first)."""
    style = look(Stage, stage).style
    inner = width - 4
    title = Text(look(Stage, stage).cell, style=style)
    rows = [Text("╭" + "─" * (width - 2) + "╮", style=style)]
    for line in [title, *content] + [Text()] * (height - 1 - len(content)):
        row = Text()
        row.append("│ ", style=style)
        row.append_text(line)
        row.append(" " * (inner - line.cell_len))
        row.append(" │", style=style)
        rows.append(row)
    rows.append(Text("╰" + "─" * (width - 2) + "╯", style=style))
    return rows


def render_stage_graph(versions: Iterable[VersionLike], selected: int | None = None, width: int = 80) -> Text:
    """The whole graph for one group's versions (the console's snapshots of them, stage as text);
    `selected` is a version number to mark."""
    require_int("width", width, MIN_WIDTH)
    versions = list(versions)  # read once per box
    box_w = (width - 2 * GAP) // len(TOP_ROW)
    full_w = box_w * len(TOP_ROW) + GAP * (len(TOP_ROW) - 1)
    contents = [_version_lines(_version_tokens(versions, stage, selected), box_w - 4) for stage in TOP_ROW]
    height = 1 + max(len(c) for c in contents)
    boxes = [_box(stage, content, box_w, height) for stage, content in zip(TOP_ROW, contents)]
    lines = []
    for row in range(height + 2):
        line = Text()
        for index, box in enumerate(boxes):
            if index:
                a, b = TOP_ROW[index - 1], TOP_ROW[index]
                line.append(_gap(b in ALLOWED_TRANSITIONS[a], a in ALLOWED_TRANSITIONS[b], row - 1), style="bold")
            line.append_text(box[row])
        lines.append(line)
    lines.extend(_vertical_arrows(box_w))
    bottom = _version_lines(_version_tokens(versions, BOTTOM, selected), full_w - 4)
    lines.extend(_box(BOTTOM, bottom, full_w, 1 + len(bottom)))
    return Text("\n").join(lines)


def _vertical_arrows(box_w: int) -> list[Text]:
    """Two rows of ▲/▼ under each top box: ▲ (left) for Archived → stage, ▼ (right) for stage → Archived."""
    rows = [[" "] * (box_w * len(TOP_ROW) + GAP * (len(TOP_ROW) - 1)) for _ in range(2)]
    for index, stage in enumerate(TOP_ROW):
        centre = index * (box_w + GAP) + box_w // 2
        if stage in ALLOWED_TRANSITIONS[BOTTOM]:
            rows[0][centre - 2], rows[1][centre - 2] = "▲", "│"
        if BOTTOM in ALLOWED_TRANSITIONS[stage]:
            rows[0][centre + 2], rows[1][centre + 2] = "│", "▼"
    return [Text("".join(row).rstrip(), style="bold") for row in rows]


class PromoteTarget(NamedTuple):
    stage: Stage
    allowed: bool
    reason: str  # empty when allowed; otherwise why not, with the allowed targets


def promote_targets(stage: Stage | str) -> list[PromoteTarget]:
    """Every stage, in graph order, with whether a version in `stage` may move there and why not: the
    promote dialog shows illegal targets disabled with this reason rather than hiding them."""
    current = parse_stage(stage)
    allowed = ALLOWED_TRANSITIONS[current]
    choices = ", ".join(allowed)
    targets = []
    for target in Stage:
        if target in allowed:
            targets.append(PromoteTarget(target, True, ""))
        elif target is current:
            targets.append(PromoteTarget(target, False, f"the version is already {current}; allowed: {choices}"))
        else:
            targets.append(
                PromoteTarget(target, False, f"{current} → {target} is not an allowed transition; allowed: {choices}")
            )
    return targets


class TransitionLike(Protocol):
    """Read-only, like `VersionLike`: a `TransitionSnapshot` or a `Transition`."""

    @property
    def version(self) -> int: ...
    @property
    def from_stage(self) -> Stage | str: ...
    @property
    def to_stage(self) -> Stage | str: ...
    @property
    def at(self) -> float: ...


def history_rows(transitions: Iterable[TransitionLike]) -> list[tuple[str, ...]]:
    """(#, version, from, to, at UTC) in history order; the row number is the row key, since one version
    can move many times. UTC keeps the table identical on every machine."""
    return [
        (
            str(number),
            f"v{event.version}",
            look(Stage, event.from_stage).cell,
            look(Stage, event.to_stage).cell,
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(event.at)),
        )
        for number, event in enumerate(transitions, start=1)
    ]
