import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.text import Text

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.pipelines import RunStatus, StepStatus
from kinetic_tui.core.platform.registry import Stage
from kinetic_tui.core.platform.training import TrainingStatus
from kinetic_tui.render.formatting import (
    LOOKS,
    fit,
    humanize_age,
    humanize_duration,
    look,
    parse_humanized,
    percent,
    short_hash,
    sparkline,
    status_cell,
    styled_cell,
    wrap_pieces,
)

ANSI_16 = {"black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"}
ANSI_16 |= {f"bright_{name}" for name in ANSI_16}
ATTRIBUTES = {"bold", "dim", "reverse", "italic", "underline"}


@pytest.mark.parametrize("kind", [JobStatus, TrainingStatus, Stage, StepStatus, RunStatus])
def test_every_member_has_a_look(kind):
    for member in kind:
        assert look(kind, member).word == member.value


@pytest.mark.parametrize("kind", list(LOOKS))
def test_glyphs_distinct_single_cell_and_16_colour(kind):
    """NO_COLOR readability: within a kind, the glyph alone tells the statuses apart."""
    looks = list(LOOKS[kind].values())
    glyphs = [found.glyph for found in looks]
    assert len(set(glyphs)) == len(glyphs)
    for found in looks:
        assert cell_len(found.glyph) == 1
        words = set(found.style.split())
        assert words <= ANSI_16 | ATTRIBUTES, found
        assert words & ANSI_16 or "dim" in words  # a colour as well as the glyph


def test_look_is_case_insensitive_and_kind_specific():
    assert look(StepStatus, "failed") == look(StepStatus, StepStatus.FAILED)
    assert look(JobStatus, "failed").word == "FAILED"
    assert look(TrainingStatus, "failed").word == "Failed"
    assert status_cell(StepStatus, "Running") == "▶ Running"
    assert status_cell(Stage, Stage.PRODUCTION) == "★ Production"


def test_look_rejects_unknown_status_and_kind():
    with pytest.raises(ValidationError, match="StepStatus: unknown status 'Lost'; valid: Executed, Cached"):
        look(StepStatus, "Lost")
    with pytest.raises(ValidationError, match="kind: 'int' has no looks; valid: JobStatus"):
        look(int, "x")


def test_styled_cell_restores_the_status_colour():
    assert styled_cell("✓ SUCCEEDED").style == "green"
    assert styled_cell("★ Production").style == "bold green"
    assert styled_cell("job-1234").style == ""


@pytest.mark.parametrize(
    "seconds, text, parsed",
    [
        (0, "0ms", 0),
        (0.0125, "12ms", 0.012),
        (0.999, "999ms", 0.999),
        (1, "1s", 1),
        (3.7, "3s", 3),
        (59, "59s", 59),
        (60, "1m00s", 60),
        (125, "2m05s", 125),
        (3599, "59m59s", 3599),
        (3600, "1h00m", 3600),
        (3725, "1h02m", 3720),
        (86399, "23h59m", 86340),
        (86400, "1d00h", 86400),
        (3 * 86400 + 4 * 3600 + 5, "3d04h", 3 * 86400 + 4 * 3600),
    ],
)
def test_humanize_duration(seconds, text, parsed):
    assert humanize_duration(seconds) == text
    assert parse_humanized(text) == pytest.approx(parsed)


@given(st.floats(0, 10**7, allow_nan=False))
def test_humanize_duration_orders_like_seconds(seconds):
    """What sort_rows relies on: parsing the text back never exceeds the value and keeps its unit order."""
    text = humanize_duration(seconds)
    assert re.fullmatch(r"\d+ms|\d+s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh", text)
    assert parse_humanized(text) <= seconds + 1e-9


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "3", True])
def test_humanize_duration_rejects(bad):
    with pytest.raises(ValidationError, match="seconds"):
        humanize_duration(bad)


def test_humanize_age():
    assert humanize_age(100.0, 225.9) == "2m05s"
    assert humanize_age(100.0, 100.4) == "0s"
    assert humanize_age(105.0, 100.0) == "0s"  # another process's clock ran ahead


def test_parse_humanized_rejects_other_text():
    for text in ["", "abc", "5", "✓ Executed", "3/5"]:
        assert parse_humanized(text) is None


def test_short_hash():
    assert short_hash("0123456789abcdef") == "01234567"
    assert short_hash("0123456789abcdef", 4) == "0123"
    assert short_hash(None) == "-"


def test_fit():
    assert fit("short", 10) == "short"
    assert fit("a" * 12, 10) == "a" * 9 + "…"
    assert cell_len(fit("名前" * 10, 7)) <= 7


def test_percent():
    assert percent(1, 3) == "33%"
    assert percent(1, 3, 1) == "33.3%"
    assert percent(0, 0) == "-"
    assert percent(0, 0, empty="n/a") == "n/a"


def test_sparkline():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], 7) == "▁▂▃▄▅▆▇█"
    assert sparkline([0, 10, -1], 4) == "▁█▁"  # clamped into the scale
    with pytest.raises(ValidationError, match="top: must be > 0"):
        sparkline([1], 0)


def test_wrap_pieces():
    pieces = [Text(word) for word in ["alpha", "beta", "gamma", "delta"]]
    assert [line.plain for line in wrap_pieces(pieces, 12, indent=2)] == ["alpha  beta", "  gamma", "  delta"]
    assert [line.plain for line in wrap_pieces([Text("x" * 20)], 8)] == ["xxxxxxx…"]
