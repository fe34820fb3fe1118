"""The accelerator grammar against the reference registry, transcribed here independently of the module."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.accelerators import (
    CpuConfig,
    GpuConfig,
    TpuConfig,
    all_accelerators,
    category,
    format_accelerator,
    is_multi_host,
    list_accelerators,
    parse_accelerator,
)
from kinetic_tui.core.errors import ValidationError

# reference/accelerators.md, GPUs: name -> (GKE label, {count: machine type})
N1_SMALL = {1: "n1-standard-4", 2: "n1-standard-8", 4: "n1-standard-16"}
GPUS = {
    "l4": ("nvidia-l4", {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}),
    "t4": ("nvidia-tesla-t4", N1_SMALL),
    "v100": ("nvidia-tesla-v100", {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}),
    "a100": (
        "nvidia-tesla-a100",
        {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g", 16: "a2-megagpu-16g"},
    ),
    "a100-80gb": (
        "nvidia-a100-80gb",
        {1: "a2-ultragpu-1g", 2: "a2-ultragpu-2g", 4: "a2-ultragpu-4g", 8: "a2-ultragpu-8g", 16: "a2-ultragpu-16g"},
    ),
    "h100": ("nvidia-h100-80gb", {1: "a3-highgpu-1g", 2: "a3-highgpu-2g", 4: "a3-highgpu-4g", 8: "a3-highgpu-8g"}),
    "p4": ("nvidia-tesla-p4", N1_SMALL),
    "p100": ("nvidia-tesla-p100", N1_SMALL),
}

# TPUs: (name, chips, topology, GKE accelerator, machine type, nodes)
TPUS = [
    ("v3", 4, "2x2", "tpu-v3-podslice", "ct3-hightpu-4t", 1),
    *[
        ("v3", chips, topo, "tpu-v3-podslice", "ct3p-hightpu-4t", chips // 4)
        for chips, topo in [
            (16, "4x4"),
            (32, "4x8"),
            (64, "8x8"),
            (128, "8x16"),
            (256, "16x16"),
            (512, "16x32"),
            (1024, "32x32"),
            (2048, "32x64"),
        ]
    ],
    *[
        ("v4", chips, topo, "tpu-v4-podslice", "ct4p-hightpu-4t", chips // 4)
        for chips, topo in [
            (4, "2x2x1"),
            (8, "2x2x2"),
            (16, "2x2x4"),
            (32, "2x4x4"),
            (64, "4x4x4"),
            (128, "4x4x8"),
            (256, "4x8x8"),
            (512, "8x8x8"),
            (1024, "8x8x16"),
            (2048, "8x16x16"),
            (4096, "16x16x16"),
        ]
    ],
    ("v5litepod", 1, "1x1", "tpu-v5-lite-podslice", "ct5lp-hightpu-1t", 1),
    ("v5litepod", 4, "2x2", "tpu-v5-lite-podslice", "ct5lp-hightpu-4t", 1),
    ("v5litepod", 8, "2x4", "tpu-v5-lite-podslice", "ct5lp-hightpu-8t", 1),
    *[
        ("v5litepod", chips, topo, "tpu-v5-lite-podslice", "ct5lp-hightpu-4t", chips // 4)
        for chips, topo in [(16, "4x4"), (32, "4x8"), (64, "8x8"), (128, "8x16"), (256, "16x16")]
    ],
    ("v5p", 8, "2x2x2", "tpu-v5p-slice", "ct5p-hightpu-4t", 2),
    ("v5p", 16, "2x2x4", "tpu-v5p-slice", "ct5p-hightpu-4t", 4),
    ("v5p", 32, "2x4x4", "tpu-v5p-slice", "ct5p-hightpu-4t", 8),
    ("v6e", 8, "2x4", "tpu-v6e-slice", "ct6e-standard-4t", 2),
    ("v6e", 16, "4x4", "tpu-v6e-slice", "ct6e-standard-4t", 4),
]
DEFAULT_CHIPS = {"v3": 4, "v4": 4, "v5litepod": 4, "v5p": 8, "v6e": 8}

GPU_CASES = [(name, label, count, machine) for name, (label, m) in GPUS.items() for count, machine in m.items()]


def expected_tpu(name: str, chips: int, spot: bool = False) -> TpuConfig:
    row = next(r for r in TPUS if r[0] == name and r[1] == chips)
    return TpuConfig(*row, spot=spot)


@pytest.mark.parametrize("name,label,count,machine", GPU_CASES)
def test_every_gpu_shape(name, label, count, machine):
    expected = GpuConfig(name, count, label, machine, False)
    assert parse_accelerator(f"{name}x{count}") == expected
    assert parse_accelerator(f"{label}x{count}") == expected
    assert parse_accelerator(f"gpu:{name}x{count}") == expected
    assert parse_accelerator(f"GPU-{name.upper()}X{count}") == expected
    assert category(expected) == "gpu" and expected.num_nodes == 1 and not is_multi_host(expected)


@pytest.mark.parametrize("name,chips,topology,gke,machine,nodes", TPUS)
def test_every_tpu_shape(name, chips, topology, gke, machine, nodes):
    expected = TpuConfig(name, chips, topology, gke, machine, nodes, False)
    for text in (
        f"{name}-{topology}",
        f"{name}-{chips}",
        f"tpu:{name}-{chips}",
        f"tpu-{name}-{topology}",
        f"{gke}-{chips}",
        f"  {name.upper()}-{topology.upper()}  ",
    ):
        assert parse_accelerator(text) == expected, text
    assert category(expected) == "tpu"
    assert is_multi_host(expected) is (nodes > 1)


@pytest.mark.parametrize("name", list(GPUS))
def test_bare_gpu_name_is_one_gpu(name):
    label, machines = GPUS[name]
    assert parse_accelerator(name) == GpuConfig(name, 1, label, machines[1], False)
    assert parse_accelerator(label) == parse_accelerator(name)


@pytest.mark.parametrize("name", list(DEFAULT_CHIPS))
def test_bare_tpu_name_uses_default_chips(name):
    expected = expected_tpu(name, DEFAULT_CHIPS[name])
    assert parse_accelerator(name) == expected
    assert parse_accelerator(f"tpu:{name}") == expected
    assert parse_accelerator(expected.gke_accelerator) == expected  # tpu-v4-podslice is a name, not tpu- + v4-...


@pytest.mark.parametrize(
    "text,expected",
    [
        ("cpu", CpuConfig(False)),
        ("CPU:SPOT", CpuConfig(True)),
        ("gpu", GpuConfig("l4", 1, "nvidia-l4", "g2-standard-4", False)),
        ("gpu:spot", GpuConfig("l4", 1, "nvidia-l4", "g2-standard-4", True)),
        ("tpu", expected_tpu("v5litepod", 4)),
        ("v5e", expected_tpu("v5litepod", 4)),
        ("v5e-2x4", expected_tpu("v5litepod", 8)),
        ("tpu:v5e-16:spot", expected_tpu("v5litepod", 16, spot=True)),
        ("nvidia-l4", GpuConfig("l4", 1, "nvidia-l4", "g2-standard-4", False)),
        ("Nvidia-Tesla-T4x4:Spot", GpuConfig("t4", 4, "nvidia-tesla-t4", "n1-standard-16", True)),
        ("gpu-a100-80gbx2", GpuConfig("a100-80gb", 2, "nvidia-a100-80gb", "a2-ultragpu-2g", False)),
        # count only: the most capable GPU offering it (h100, a100-80gb, a100, l4, v100, t4, p100, p4)
        ("1", GpuConfig("h100", 1, "nvidia-h100-80gb", "a3-highgpu-1g", False)),
        ("gpu:8", GpuConfig("h100", 8, "nvidia-h100-80gb", "a3-highgpu-8g", False)),
        ("gpu-16", GpuConfig("a100-80gb", 16, "nvidia-a100-80gb", "a2-ultragpu-16g", False)),
        ("16:spot", GpuConfig("a100-80gb", 16, "nvidia-a100-80gb", "a2-ultragpu-16g", True)),
        # chip count only: v6e, v5p, v5litepod, v4, v3
        ("tpu:8", expected_tpu("v6e", 8)),
        ("tpu-4", expected_tpu("v5litepod", 4)),
        ("tpu:1", expected_tpu("v5litepod", 1)),
        ("tpu:32", expected_tpu("v5p", 32)),
        ("tpu:4096", expected_tpu("v4", 4096)),
        ("tpu:2048", expected_tpu("v4", 2048)),
    ],
)
def test_shorthands_and_aliases(text, expected):
    assert parse_accelerator(text) == expected


def test_spot_is_kept_and_category():
    assert parse_accelerator("l4x2:spot").spot is True
    assert parse_accelerator("l4x2").spot is False
    assert category(parse_accelerator("cpu")) == "cpu"
    with pytest.raises(TypeError):
        category("l4")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,fragments",
    [
        ("a100x3", ["a100 offers 1, 2, 4, 8, 16 GPUs, not 3"]),
        ("h100x16", ["h100 offers 1, 2, 4, 8 GPUs, not 16"]),
        ("l4x0", ["l4 offers 1, 2, 4, 8 GPUs"]),
        ("l4x", ["l4 offers 1, 2, 4, 8 GPUs"]),
        ("l4x-1", ["l4 offers 1, 2, 4, 8 GPUs"]),
        ("t4x8", ["t4 offers 1, 2, 4 GPUs, not 8"]),
        ("nvidia-l4x3", ["l4 offers 1, 2, 4, 8 GPUs, not 3"]),
        ("l4x99999999999999999999", ["l4 offers 1, 2, 4, 8 GPUs"]),
        ("gpu:3", ["no GPU shape has 3 GPUs", "1, 2, 4, 8, 16"]),
        ("0", ["no GPU shape has 0 GPUs", "1, 2, 4, 8, 16"]),
        ("tpu:2", ["no TPU shape has 2 chips", "1, 4, 8, 16"]),
        ("tpu:0", ["no TPU shape has 0 chips"]),
        ("v4-3", ["v4 offers 4, 8, 16, 32", "not 3"]),
        ("v5p-4", ["v5p offers 8, 16, 32 chips, not 4"]),
        ("v6e-4", ["v6e offers 8, 16 chips, not 4"]),
        ("v5e-2", ["v5litepod offers 1, 4, 8, 16"]),
        ("v4-2x2", ["v4 topologies are 2x2x1, 2x2x2", "not '2x2'"]),
        ("v6e-2x2", ["v6e topologies are 2x4, 4x4, not '2x2'"]),
        ("v3-2x2x2", ["v3 topologies are 2x2, 4x4"]),
        ("v4-big", ["v4 size must be a chip count (4, 8", "or a topology (2x2x1"]),
        ("v5p-", ["v5p size must be", "8, 16, 32"]),
        ("v5e-4-4", ["v5litepod size must be"]),
        ("foo", ["unknown accelerator name", "GPUs are l4, t4, v100, a100", "TPUs are v3, v4, v5litepod"]),
        ("", ["unknown accelerator name"]),
        ("   ", ["unknown accelerator name"]),
        ("l4 x2", ["unknown accelerator name"]),
        ("2xl4", ["unknown accelerator name"]),
        ("v4x2", ["unknown accelerator name", "v4"]),
        ("gpux2", ["unknown accelerator name"]),
        ("tpu:", ["unknown TPU ''", "TPUs are v3"]),
        ("gpu:", ["unknown GPU ''", "GPUs are l4"]),
        ("gpu:v4", ["unknown GPU 'v4'", "GPUs are l4, t4"]),
        ("tpu:l4", ["unknown TPU 'l4'", "TPUs are v3, v4"]),
        ("gpu:cpu", ["unknown GPU 'cpu'"]),
        ("tpu:gpu", ["unknown TPU 'gpu'"]),
        ("l4:bar", ["unexpected ':'", ":spot"]),
        ("l4:spot:spot", ["unexpected ':'", ":spot"]),
        ("spot:l4", ["unexpected ':'"]),
        ("gpu::l4", ["unexpected ':'"]),
        ("cpu:two", ["unexpected ':'"]),  # `cpu:N` is a CPU job; anything else after `cpu:` is not
        ("32", ["no GPU shape has 32 GPUs", "for a TPU slice of 32 chips write tpu:32"]),
        (":spot", ["unknown accelerator name"]),
        ("cpux2", ["unknown accelerator name"]),
        ("gpu_l4", ["unknown accelerator name"]),
        ("tpu-v5-lite-podslice-3", ["v5litepod offers 1, 4, 8"]),
        ("l4\nx2", ["unknown accelerator name"]),
        ("a100x\n3", ["a100 offers 1, 2, 4, 8, 16 GPUs"]),
        ("v100x٣", ["v100 offers 1, 2, 4, 8 GPUs"]),  # a non-ASCII digit is not a count
    ],
)
def test_malformed_strings_name_the_valid_choices(text, fragments):
    with pytest.raises(ValidationError) as info:
        parse_accelerator(text)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in message and message.startswith("invalid accelerator ")
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("value", [None, 4, b"l4", ["l4"]])
def test_non_string_is_a_value_error(value):
    with pytest.raises(ValidationError, match="must be a string"):
        parse_accelerator(value)  # type: ignore[arg-type]


def test_long_input_is_truncated_in_the_message():
    with pytest.raises(ValidationError) as info:
        parse_accelerator("z" * 10_000)
    assert len(str(info.value)) < 400


GRAMMAR_PIECES = st.sampled_from(
    [
        "gpu",
        "tpu",
        "cpu",
        ":",
        "-",
        "x",
        "spot",
        "l4",
        "a100",
        "a100-80gb",
        "nvidia-",
        "tesla-",
        "v4",
        "v5e",
        "v5litepod",
        "tpu-v4-podslice",
        "2",
        "4",
        "16",
        "0",
        "2x2",
        "2x2x1",
        "99999999999",
        " ",
        "\n",
        "٣",
        "İ",
    ]
)


@given(st.one_of(st.text(), st.lists(GRAMMAR_PIECES, max_size=6).map("".join)))
@settings(max_examples=400)
def test_arbitrary_text_raises_only_value_error(text):
    try:
        config = parse_accelerator(text)
    except ValidationError as exc:
        assert "\n" not in str(exc)
    else:
        assert parse_accelerator(format_accelerator(config)) == config


@pytest.mark.parametrize("spot", [False, True])
def test_round_trip_every_registry_shape(spot):
    configs = all_accelerators()
    assert len(configs) == 1 + len(GPU_CASES) + len(TPUS)
    for config in configs:
        config = dataclasses.replace(config, spot=spot)
        text = format_accelerator(config)
        assert text == str(config)
        assert text.endswith(":spot") is spot
        assert parse_accelerator(text) == config
        assert parse_accelerator(text.upper()) == config


def test_canonical_forms():
    assert str(parse_accelerator("nvidia-tesla-a100x16:spot")) == "a100x16:spot"
    assert str(parse_accelerator("tpu-v5-lite-podslice-16")) == "v5litepod-4x4"
    assert str(parse_accelerator("cpu")) == "cpu"
    with pytest.raises(TypeError):
        format_accelerator("l4x1")  # type: ignore[arg-type]


def test_list_accelerators_rows():
    rows = list_accelerators()
    assert len(rows) == len(all_accelerators())
    by_key = {row["accelerator"]: row for row in rows}
    assert by_key["cpu"]["category"] == "cpu" and by_key["cpu"]["num_nodes"] == 1
    assert by_key["a100x16"] == {
        "accelerator": "a100x16",
        "category": "gpu",
        "name": "a100",
        "count": 16,
        "topology": None,
        "machine_type": "a2-megagpu-16g",
        "gke_label": "nvidia-tesla-a100",
        "num_nodes": 1,
        "multi_host": False,
    }
    assert by_key["v4-4x4x4"] == {
        "accelerator": "v4-4x4x4",
        "category": "tpu",
        "name": "v4",
        "count": 64,
        "topology": "4x4x4",
        "machine_type": "ct4p-hightpu-4t",
        "gke_label": "tpu-v4-podslice",
        "num_nodes": 16,
        "multi_host": True,
    }
    for row in rows:
        assert parse_accelerator(row["accelerator"]).num_nodes == row["num_nodes"]
