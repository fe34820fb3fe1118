"""Kinetic's accelerator strings: each one Kinetic accepts parses here to the shape Kinetic gives it.

`tests/golden/kinetic_accelerators.json` records, for every string of a systematic sample (each GPU and TPU
name and GKE alias, with and without `gpu:`/`gpu-`/`tpu:`/`tpu-` prefixes, every count, chip count and
topology, bare counts, `cpu:N`, `:spot`, upper case and padding) that Kinetic's `parse_accelerator`
accepts, the shape it returned: `["cpu"]` (Kinetic's None), `["gpu", name, count, machine, spot]` or
`["tpu", name, chips, topology, machine, nodes, spot]`. It was produced by running Kinetic's parser once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kinetic_tui.core.accelerators import (
    AcceleratorConfig,
    CpuConfig,
    GpuConfig,
    TpuConfig,
    generate_pool_name,
    get_category,
    parse_accelerator,
)
from kinetic_tui.core.errors import ValidationError

GOLDEN = json.loads((Path(__file__).parent / "golden" / "kinetic_accelerators.json").read_text())

# Bare counts that no GPU offers: Kinetic silently picks a multi-host TPU slice; here they are refused
# with a pointer to `tpu:N`, the unambiguous spelling of the same shape.
BARE_TPU_ONLY = re.compile(r"\s*[0-9]+\s*(:spot)?\s*")


def shape(config: AcceleratorConfig) -> list[object]:
    if isinstance(config, GpuConfig):
        return ["gpu", config.name, config.count, config.machine_type, config.spot]
    if isinstance(config, TpuConfig):
        return ["tpu", config.name, config.chips, config.topology, config.machine_type, config.num_nodes, config.spot]
    return ["cpu"]


def test_the_sample_is_large_and_covers_every_form() -> None:
    texts = [text for text, _ in GOLDEN]
    assert len(texts) > 1100
    for fragment in ("gpu:", "gpu-", "tpu:", "tpu-", "nvidia-", "v5e", ":spot", "cpu:8", "  "):
        assert any(fragment in text for text in texts), fragment


def test_every_string_kinetic_accepts_parses_to_kinetic_s_shape_but_the_deliberate_differences() -> None:
    mismatched, refused = [], []
    for text, expected in GOLDEN:
        if expected[0] == "tpu" and BARE_TPU_ONLY.fullmatch(text):
            with pytest.raises(ValidationError, match=rf"write tpu:{expected[2]}"):
                parse_accelerator(text)
            assert shape(parse_accelerator(f"tpu:{text.strip()}")) == expected
            refused.append(text)
            continue
        got = shape(parse_accelerator(text))
        if got != expected:
            mismatched.append((text, expected, got))
    assert mismatched == []
    assert len(refused) == 17  # 32 ... 4096, with and without :spot, and one padded


@pytest.mark.parametrize("text", ["cpu:spot", "cpu:8:spot", "CPU:16:spot"])
def test_a_spot_cpu_keeps_its_spot_flag(text: str) -> None:
    assert parse_accelerator(text) == CpuConfig(spot=True)


def test_cpu_n_is_a_cpu_job() -> None:
    assert parse_accelerator("cpu:8") == parse_accelerator(" CPU:1 ") == CpuConfig()
    assert str(parse_accelerator("cpu:8")) == "cpu"


def test_spot_keyword_is_the_suffix() -> None:
    assert parse_accelerator("l4x2", spot=True) == parse_accelerator("l4x2:spot")
    assert parse_accelerator("v5e-2x2:spot", spot=False).spot  # the suffix wins, as in Kinetic
    assert parse_accelerator("cpu", spot=True) == CpuConfig(spot=True)
    with pytest.raises(ValueError, match="spot must be True or False"):
        parse_accelerator("l4", spot="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,category",
    [("cpu", "cpu"), ("cpu:4", "cpu"), ("l4", "gpu"), ("gpu:8", "gpu"), ("v5e-2x4", "tpu"), ("tpu:16", "tpu")],
)
def test_get_category_takes_a_string(text: str, category: str) -> None:
    assert get_category(text) == category


def test_get_category_of_a_bad_string_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown accelerator name"):
        get_category("quantum")


def test_generate_pool_name_is_kinetic_s_shape_and_fresh_each_time() -> None:
    gpu, tpu = parse_accelerator("a100-80gbx4"), parse_accelerator("v5p-16")
    names = {generate_pool_name(gpu) for _ in range(20)}
    assert len(names) > 1 and all(re.fullmatch(r"gpu-a100-80gb-[0-9a-f]{4}", name) for name in names)
    assert re.fullmatch(r"tpu-v5p-[0-9a-f]{4}", generate_pool_name(tpu))
    with pytest.raises(TypeError, match="GPU or TPU"):
        generate_pool_name(CpuConfig())
