import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.console.snapshots import ModelVersionSnapshot
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.registry import ALLOWED_TRANSITIONS, ModelRegistry, ModelVersion, Stage, Transition
from kinetic_tui.render.stage_graph import history_rows, promote_targets, render_stage_graph
from tests.render import widest

GOLDEN_60 = """\
╭──────────────╮      ╭──────────────╮      ╭──────────────╮
│ ○ None       │ ───► │ ◇ Staging    │ ───► │ ★ Production │
│ v1           │ ◄─── │ v2 ▸v5       │ ◄─── │ v3           │
╰──────────────╯      ╰──────────────╯      ╰──────────────╯
      ▲   │                     │                     │
      │   ▼                     ▼                     ▼
╭──────────────────────────────────────────────────────────╮
│ ▪ Archived                                               │
│ v4                                                       │
╰──────────────────────────────────────────────────────────╯"""


def versions(*stages: Stage) -> list[ModelVersion]:
    return [ModelVersion("g", number, f"hash{number}", {}, None, stage) for number, stage in enumerate(stages, 1)]


FIXTURE = versions(Stage.NONE, Stage.STAGING, Stage.PRODUCTION, Stage.ARCHIVED, Stage.STAGING)


def test_golden_graph_with_selection():
    assert render_stage_graph(FIXTURE, selected=5, width=60).plain == GOLDEN_60


def test_production_is_bold_and_starred_and_selection_is_reversed():
    text = render_stage_graph(FIXTURE, selected=5)
    plain = text.plain
    assert "★ Production" in plain
    styles = {plain[span.start : span.end]: str(span.style) for span in text.spans}
    assert "bold" in styles["v3"]
    assert "bold" in styles["★ Production"]
    assert "reverse" in styles["▸v5"]
    assert "▸" not in plain.replace("▸v5", "")


def test_arrows_are_exactly_the_allowed_transitions():
    """Each drawn arrow corresponds to one ALLOWED_TRANSITIONS edge and each edge is drawn once."""
    lines = render_stage_graph([], width=80).plain.split("\n")
    assert lines[1].count("───►") == 2  # None → Staging, Staging → Production
    assert lines[2].count("◄───") == 2  # Staging → None, Production → Staging
    assert lines[4].count("▲") == 1  # Archived → None
    assert lines[5].count("▼") == 3  # None, Staging, Production → Archived
    drawn = 2 + 2 + 1 + 3
    assert drawn == sum(len(targets) for targets in ALLOWED_TRANSITIONS.values())
    # the one upward arrow sits under the None box, left of that box's downward arrow
    assert lines[4].index("▲") < lines[5].index("▼") < lines[1].index("◇")


def test_console_snapshots_render_like_versions():
    snapshots = (ModelVersionSnapshot.of(model) for model in FIXTURE)  # stage as text, a one-shot iterable
    assert render_stage_graph(snapshots, selected=5, width=60).plain == GOLDEN_60


def test_empty_boxes_say_so():
    plain = render_stage_graph([], width=80).plain
    assert plain.count("(empty)") == 4


@pytest.mark.parametrize("width", [60, 61, 80, 120])
def test_fits_width_with_many_versions(width):
    many = versions(*[list(Stage)[i % 4] for i in range(400)])
    text = render_stage_graph(many, selected=7, width=width)
    assert widest(text) <= width
    assert "more" in text.plain  # overflow collapses instead of growing the graph
    assert len(text.plain.split("\n")) <= 16


def test_selected_version_stays_visible_when_a_box_overflows():
    plain = render_stage_graph(versions(*[Stage.ARCHIVED] * 300), selected=299, width=60).plain
    assert "▸v299" in plain
    assert "│ ▸v299 v1 v2 v3" in plain


@settings(max_examples=40)
@given(st.lists(st.sampled_from(list(Stage)), max_size=60), st.integers(60, 100))
def test_every_version_is_shown_or_counted(stages, width):
    """No version silently disappears: it is drawn, or counted in a "+N more"."""
    plain = render_stage_graph(versions(*stages), width=width).plain
    shown = sum(token.startswith("v") for token in plain.replace("│", " ").split())
    more = sum(int(t[1:]) for t in plain.replace("│", " ").split() if t.startswith("+"))
    assert shown + more == len(stages)
    assert widest(render_stage_graph(versions(*stages), width=width)) <= width


def test_rejects_too_narrow_width():
    with pytest.raises(ValidationError, match="width: must be >= 60, got 59"):
        render_stage_graph(FIXTURE, width=59)


@pytest.mark.parametrize("current", list(Stage))
def test_promote_targets_match_the_registry(current):
    targets = promote_targets(current)
    assert [t.stage for t in targets] == list(Stage)
    for target in targets:
        assert target.allowed == (target.stage in ALLOWED_TRANSITIONS[current])
        assert (target.reason == "") == target.allowed
        # the registry agrees: an allowed target transitions, a refused one raises
        registry = ModelRegistry(clock=lambda: 0.0)
        registry.register("g", "h")
        path = {
            Stage.NONE: [],
            Stage.STAGING: [Stage.STAGING],
            Stage.PRODUCTION: [Stage.STAGING, Stage.PRODUCTION],
            Stage.ARCHIVED: [Stage.ARCHIVED],
        }[current]
        for step in path:
            registry.transition("g", 1, step)
        if target.allowed:
            assert registry.transition("g", 1, target.stage).stage is target.stage
        else:
            with pytest.raises(ValueError):
                registry.transition("g", 1, target.stage)


def test_promote_target_reasons_name_the_edge_and_the_choices():
    by_stage = {t.stage: t for t in promote_targets("archived")}
    assert by_stage[Stage.PRODUCTION].reason == ("Archived → Production is not an allowed transition; allowed: None")
    assert by_stage[Stage.ARCHIVED].reason == "the version is already Archived; allowed: None"
    assert by_stage[Stage.NONE] == (Stage.NONE, True, "")


def test_promote_targets_rejects_unknown_stage():
    with pytest.raises(ValidationError, match="'Live' is not a stage; choose from None, Staging"):
        promote_targets("Live")


def test_history_rows():
    rows = history_rows(
        [Transition(2, Stage.NONE, Stage.STAGING, 0.0), Transition(2, Stage.STAGING, Stage.PRODUCTION, 90061.5)]
    )
    assert rows == [
        ("1", "v2", "○ None", "◇ Staging", "1970-01-01 00:00:00"),
        ("2", "v2", "◇ Staging", "★ Production", "1970-01-02 01:01:01"),
    ]
