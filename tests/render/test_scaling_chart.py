import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.autoscaling import Endpoint, ScalingEvent
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.render.scaling_chart import cache_rows, render_scaling_chart
from tests.render import widest

# Min 1, max 5, target 10, cooldowns out 3 / in 5:
# observe(45, 0) → 5 scale_out; (5, 1) hold; (5, 9) → 1 scale_in; (9999, 20) → 5
GOLDEN = """\
5 ┤██ █
4 ┤██ █
3 ┤██ █
2 ┤██ █
1 ┤█┼██
  └────
   ↑H↓↑
   0 9
c ┤▁▁▁█
█ instances  ─ desired  ↑ out  ↓ in  H hold  r reconfigure
c concurrency (peak 9999)"""


def worked_example() -> list[ScalingEvent]:
    endpoint = Endpoint("e")
    for concurrency, tick in [(45, 0), (5, 1), (5, 9), (9999, 20)]:
        endpoint.observe(concurrency, tick)
    return endpoint.history


def test_golden_worked_example():
    assert render_scaling_chart(worked_example(), max_instances=5).plain == GOLDEN


def test_marks_row_has_one_mark_per_decision():
    endpoint = Endpoint("e", scale_out_cooldown=3)
    for tick, concurrency in enumerate([0, 25, 45, 45, 45, 45, 0]):
        endpoint.observe(concurrency, tick)
    lines = render_scaling_chart(endpoint.history, max_instances=5).plain.split("\n")
    marks = lines[6]
    assert [e.action for e in endpoint.history] == ["none", "scale_out", "hold", "hold", "scale_out", "none", "hold"]
    assert marks == "    ↑HH↑ H"  # the first observation changed nothing: a blank


def test_desired_above_the_bar_is_a_dash():
    """A hold while growing: desired (5) is drawn above the bar (3 instances)."""
    history = [ScalingEvent(0, 25, 3, 3, "scale_out"), ScalingEvent(1, 45, 5, 3, "hold")]
    lines = render_scaling_chart(history, max_instances=5).plain.split("\n")
    assert [line[3:] for line in lines[:5]] == [" ─", "  ", "██", "██", "██"]


def test_scaled_rows_when_max_exceeds_height():
    history = [ScalingEvent(0, 100, 20, 20, "scale_out"), ScalingEvent(1, 50, 10, 10, "scale_in")]
    lines = render_scaling_chart(history, height=4, max_instances=20).plain.split("\n")
    assert lines[:4] == ["20 ┤█ ", "15 ┤█ ", "10 ┤██", " 5 ┤██"]


def test_reconfigure_before_any_observation_has_no_tick_label():
    endpoint = Endpoint("e")
    endpoint.reconfigure(min_instances=2)
    endpoint.observe(0, 4)
    lines = render_scaling_chart(endpoint.history).plain.split("\n")
    assert lines[:6] == ["2 ┤██", "1 ┤██", "  └──", "   r ", "    4", "c ┤▁▁"]


def test_long_history_shows_only_the_last_events():
    endpoint = Endpoint("e", scale_out_cooldown=0, scale_in_cooldown=0)
    for tick in range(300):
        endpoint.observe(45 if tick % 20 < 10 else 0, tick)
    text = render_scaling_chart(endpoint.history, width=72)
    lines = text.plain.split("\n")
    assert len(lines[0]) == 72 and widest(text) <= 72
    # 69 event columns after "5 ┤": ticks 231..299; the first tick label is 231
    assert lines[7].split()[0] == "231"
    assert lines[6].count("↑") == 3 and lines[6].count("↓") == 3  # ticks 240, 260, 280 and 250, 270, 290


def test_empty_history():
    assert render_scaling_chart([]).plain == "no scaling events yet"


@settings(max_examples=40)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 3)), max_size=150), st.integers(1, 12), st.integers(20, 100)
)
def test_always_fits_width_and_height(steps, height, width):
    endpoint = Endpoint("e", max_instances=9)
    tick = 0
    for concurrency, gap in steps:
        tick += gap
        endpoint.observe(concurrency, tick)
    text = render_scaling_chart(endpoint.history, height=height, width=width, max_instances=9)
    assert widest(text) <= width
    if steps:
        plot_rows = [line for line in text.plain.split("\n") if "┤" in line and not line.lstrip().startswith("c")]
        assert len(plot_rows) == min(height, 9)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"height": 0}, "height: must be >= 1, got 0"),
        ({"max_instances": 0}, "max_instances: must be >= 1, got 0"),
        ({"width": 5}, "width: must be >= 11, got 5"),
    ],
)
def test_rejects_bad_geometry(kwargs, message):
    with pytest.raises(ValidationError, match=message):
        render_scaling_chart(worked_example(), **kwargs)


class Echo:
    def predict(self, record):
        return record


def test_cache_rows_follow_the_endpoint_lru():
    serving = MultiModelEndpoint(2)
    for name in "abc":
        serving.register(name, Echo())
    for name in ["a", "b", "a", "c", "a", "b"]:
        serving.invoke(name, 1)
    table = cache_rows(serving.loaded, serving.load_events, serving.evict_events, serving.hits, serving.misses)
    assert serving.loaded == ["a", "b"]
    assert table.rows == [("1", "a", "LRU (next out)", "1", "0"), ("2", "b", "MRU", "2", "1")]
    assert table.summary == "hit ratio 33.3% (2 hits, 4 misses) · 4 loads · 2 evictions"


def test_cache_rows_empty_and_single():
    assert cache_rows([], [], [], 0, 0) == ([], "hit ratio n/a (0 hits, 0 misses) · 0 loads · 0 evictions")
    assert cache_rows(["m"], ["m"], [], 3, 1).rows == [("1", "m", "MRU", "1", "0")]
    with pytest.raises(ValidationError, match="hits: must be >= 0, got -1"):
        cache_rows([], [], [], -1, 0)
