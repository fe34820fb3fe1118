"""Accelerator registry and the `accelerator=` string grammar.

One short string decides placement, machine shape, node count and GKE labels, so the parser is strict:
every string either maps to exactly one registry entry or fails with a one-line `ValueError` that lists
what *would* have been valid for the name it got. The registry is plain data in the tables below: the
accelerators GKE offers, with their machine types, counts and topologies.

Canonical forms (what `str(config)` prints, and what parses back to an equal config):
`cpu`, `l4x2`, `v5litepod-2x4`, each with an optional `:spot` suffix.

Kinetic's strings parse to the shapes Kinetic gives them, with two exceptions kept on purpose: `cpu:spot`
stays a spot CPU (Kinetic drops the flag), and a bare count no GPU offers (`32`) is refused with a pointer
to `tpu:32` instead of silently becoming a multi-host TPU slice.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from kinetic_tui.core.errors import ValidationError

_SPOT = ":spot"


def _spot_suffix(spot: bool) -> str:
    return _SPOT if spot else ""


@dataclass(frozen=True)
class CpuConfig:
    """A CPU-only job. `spot` is kept for symmetry: a CPU job may also ask for preemptible nodes."""

    spot: bool = False

    @property
    def num_nodes(self) -> int:
        return 1

    def __str__(self) -> str:
        return "cpu" + _spot_suffix(self.spot)


@dataclass(frozen=True)
class GpuConfig:
    """`count` GPUs of one model on one node. Build it with `parse_accelerator`, which checks the shape."""

    name: str
    count: int
    gke_label: str
    machine_type: str
    spot: bool = False

    @property
    def num_nodes(self) -> int:
        return 1

    def __str__(self) -> str:
        return f"{self.name}x{self.count}" + _spot_suffix(self.spot)


@dataclass(frozen=True)
class TpuConfig:
    """A TPU slice; `num_nodes > 1` means multi-host (one pod per node, host 0 leads)."""

    name: str
    chips: int
    topology: str
    gke_accelerator: str
    machine_type: str
    num_nodes: int
    spot: bool = False

    def __str__(self) -> str:
        return f"{self.name}-{self.topology}" + _spot_suffix(self.spot)


AcceleratorConfig = CpuConfig | GpuConfig | TpuConfig

# ---------------------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class _GpuModel:
    label: str
    machines: Mapping[int, str]  # GPU count -> machine type


@dataclass(frozen=True)
class _TpuModel:
    gke_accelerator: str
    default_chips: int
    slices: Mapping[int, tuple[str, str]]  # chips -> (topology, machine type)
    single_host: frozenset[int] = frozenset()  # chip counts on one node; every other slice has 4 chips/node

    def num_nodes(self, chips: int) -> int:
        return 1 if chips in self.single_host else chips // 4


def _on(machine: str, *sizes: tuple[int, str]) -> dict[int, tuple[str, str]]:
    """Slices of one machine type: (chips, topology) pairs -> {chips: (topology, machine)}."""
    return {chips: (topology, machine) for chips, topology in sizes}


_N1_SMALL = {1: "n1-standard-4", 2: "n1-standard-8", 4: "n1-standard-16"}

_GPUS: dict[str, _GpuModel] = {
    "l4": _GpuModel("nvidia-l4", {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}),
    "t4": _GpuModel("nvidia-tesla-t4", _N1_SMALL),
    "v100": _GpuModel(
        "nvidia-tesla-v100", {1: "n1-standard-8", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"}
    ),
    "a100": _GpuModel("nvidia-tesla-a100", {**{n: f"a2-highgpu-{n}g" for n in (1, 2, 4, 8)}, 16: "a2-megagpu-16g"}),
    "a100-80gb": _GpuModel("nvidia-a100-80gb", {n: f"a2-ultragpu-{n}g" for n in (1, 2, 4, 8, 16)}),
    "h100": _GpuModel("nvidia-h100-80gb", {n: f"a3-highgpu-{n}g" for n in (1, 2, 4, 8)}),
    "p4": _GpuModel("nvidia-tesla-p4", _N1_SMALL),
    "p100": _GpuModel("nvidia-tesla-p100", _N1_SMALL),
}
_GPU_PREFERENCE = ("h100", "a100-80gb", "a100", "l4", "v100", "t4", "p100", "p4")

_TPUS: dict[str, _TpuModel] = {
    "v3": _TpuModel(
        "tpu-v3-podslice",
        4,
        {
            **_on("ct3-hightpu-4t", (4, "2x2")),
            **_on(
                "ct3p-hightpu-4t",
                (16, "4x4"),
                (32, "4x8"),
                (64, "8x8"),
                (128, "8x16"),
                (256, "16x16"),
                (512, "16x32"),
                (1024, "32x32"),
                (2048, "32x64"),
            ),
        },
    ),
    "v4": _TpuModel(
        "tpu-v4-podslice",
        4,
        _on(
            "ct4p-hightpu-4t",
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
        ),
    ),
    "v5litepod": _TpuModel(
        "tpu-v5-lite-podslice",
        4,
        {
            **_on("ct5lp-hightpu-1t", (1, "1x1")),
            **_on("ct5lp-hightpu-4t", (4, "2x2")),
            **_on("ct5lp-hightpu-8t", (8, "2x4")),
            **_on("ct5lp-hightpu-4t", (16, "4x4"), (32, "4x8"), (64, "8x8"), (128, "8x16"), (256, "16x16")),
        },
        single_host=frozenset({1, 4, 8}),
    ),
    "v5p": _TpuModel("tpu-v5p-slice", 8, _on("ct5p-hightpu-4t", (8, "2x2x2"), (16, "2x2x4"), (32, "2x4x4"))),
    "v6e": _TpuModel("tpu-v6e-slice", 8, _on("ct6e-standard-4t", (8, "2x4"), (16, "4x4"))),
}
_TPU_PREFERENCE = ("v6e", "v5p", "v5litepod", "v4", "v3")

_GPU_ALIASES = {name: name for name in _GPUS} | {model.label: name for name, model in _GPUS.items()}
_TPU_ALIASES = (
    {name: name for name in _TPUS}
    | {model.gke_accelerator: name for name, model in _TPUS.items()}
    | {"v5e": "v5litepod"}
)
_TPU_ALIASES_LONGEST_FIRST = sorted(_TPU_ALIASES, key=len, reverse=True)

_GPU_NAMES = ", ".join(_GPUS)
_TPU_NAMES = ", ".join(name + (" (alias v5e)" if name == "v5litepod" else "") for name in _TPUS)

# ---------------------------------------------------------------------------------------------------------
# Parser

_DIGITS = re.compile(r"[0-9]+")
_TOPOLOGY = re.compile(r"[0-9]+x[0-9]+(?:x[0-9]+)?")
_COUNT = re.compile(r"[0-9]{1,9}")  # longer digit strings are no real shape (and keep int() cheap)
_MAX_ECHO = 40


def _quote(text: str) -> str:
    """Echo user text safely on one line: short digit strings bare, anything else repr'd and truncated."""
    if _COUNT.fullmatch(text):
        return text
    return repr(text if len(text) <= _MAX_ECHO else text[:_MAX_ECHO] + "...")


def _joined(numbers: Iterable[int]) -> str:
    return ", ".join(str(n) for n in sorted(numbers))


def _as_count(text: str) -> int | None:
    return int(text) if _COUNT.fullmatch(text) else None


def _pick(text: str, offered: Collection[int], name: str, unit: str) -> int:
    """Return `text` as one of the `offered` counts of `name`, or fail naming them."""
    count = _as_count(text)
    if count is None or count not in offered:
        raise ValidationError(f"{name} offers {_joined(offered)} {unit}, not {_quote(text)}")
    return count


def _most_capable(
    text: str, preference: Iterable[str], offers: Mapping[str, Collection[int]], kind: str, unit: str
) -> tuple[str, int]:
    """The first name in `preference` order that offers `text` units (`gpu:N`, `tpu:N`, bare `N`)."""
    count = _as_count(text)
    for name in preference:
        if count is not None and count in offers[name]:
            return name, count
    every = set().union(*offers.values())
    raise ValidationError(f"no {kind} shape has {_quote(text)} {unit}; choose {_joined(every)}")


def _gpu(name: str, count: int, spot: bool) -> GpuConfig:
    model = _GPUS[name]
    return GpuConfig(name, count, model.label, model.machines[count], spot)


def _gpu_sized(name: str, count_text: str, spot: bool) -> GpuConfig:
    return _gpu(name, _pick(count_text, _GPUS[name].machines, name, "GPUs"), spot)


def _gpu_by_count(text: str, spot: bool) -> GpuConfig:
    offers = {name: model.machines for name, model in _GPUS.items()}
    return _gpu(*_most_capable(text, _GPU_PREFERENCE, offers, "GPU", "GPUs"), spot)


def _tpu(name: str, chips: int, spot: bool) -> TpuConfig:
    model = _TPUS[name]
    topology, machine = model.slices[chips]
    return TpuConfig(name, chips, topology, model.gke_accelerator, machine, model.num_nodes(chips), spot)


def _tpu_sized(name: str, size: str | None, spot: bool) -> TpuConfig:
    """`size` is what followed `NAME-`: a chip count or a topology (None = the default chips)."""
    model = _TPUS[name]
    if size is None:
        return _tpu(name, model.default_chips, spot)
    if _TOPOLOGY.fullmatch(size):
        by_topology = {topology: chips for chips, (topology, _) in model.slices.items()}
        if size not in by_topology:
            raise ValidationError(f"{name} topologies are {', '.join(by_topology)}, not {_quote(size)}")
        return _tpu(name, by_topology[size], spot)
    if _DIGITS.fullmatch(size):
        return _tpu(name, _pick(size, model.slices, name, "chips"), spot)
    topologies = ", ".join(topology for topology, _ in model.slices.values())
    raise ValidationError(
        f"{name} size must be a chip count ({_joined(model.slices)}) or a topology ({topologies}), not {_quote(size)}"
    )


def _tpu_by_chips(text: str, spot: bool) -> TpuConfig:
    offers = {name: model.slices for name, model in _TPUS.items()}
    return _tpu(*_most_capable(text, _TPU_PREFERENCE, offers, "TPU", "chips"), spot)


def _split_gpu(text: str) -> tuple[str, str] | None:
    """`NAME` or `NAMExN` (no GPU name contains an x) -> (canonical name, count text)."""
    if text in _GPU_ALIASES:
        return _GPU_ALIASES[text], "1"
    head, x, count = text.rpartition("x")
    if x and head in _GPU_ALIASES:
        return _GPU_ALIASES[head], count
    return None


def _split_tpu(text: str) -> tuple[str, str | None] | None:
    """`NAME` or `NAME-SIZE` -> (canonical name, size text or None); longest alias wins."""
    for alias in _TPU_ALIASES_LONGEST_FIRST:
        if text == alias:
            return _TPU_ALIASES[alias], None
        if text.startswith(alias + "-"):
            return _TPU_ALIASES[alias], text[len(alias) + 1 :]
    return None


def _parse_gpu(body: str, spot: bool) -> GpuConfig:
    if _DIGITS.fullmatch(body):
        return _gpu_by_count(body, spot)
    split = _split_gpu(body)
    if split is None:
        raise ValidationError(f"unknown GPU {_quote(body)}; GPUs are {_GPU_NAMES} (or gpu:N for N GPUs)")
    return _gpu_sized(*split, spot)


def _bare_count(text: str, spot: bool) -> GpuConfig:
    """A bare `N` means N GPUs; a count only TPU slices offer names its `tpu:N` form rather than guessing."""
    try:
        return _gpu_by_count(text, spot)
    except ValidationError as exc:
        count = _as_count(text)
        if count is not None and any(count in model.slices for model in _TPUS.values()):
            raise ValidationError(f"{exc}; for a TPU slice of {count} chips write tpu:{count}") from None
        raise


def _parse_tpu(spec: str, body: str, spot: bool) -> TpuConfig:
    if _DIGITS.fullmatch(body):
        return _tpu_by_chips(body, spot)
    split = _split_tpu(spec) or _split_tpu(body)  # `tpu-v4-podslice` is a GKE name, not `tpu-` + `v4-podslice`
    if split is None:
        raise ValidationError(f"unknown TPU {_quote(body)}; TPUs are {_TPU_NAMES} (or tpu:N for N chips)")
    return _tpu_sized(*split, spot)


def _parse_spec(spec: str, spot: bool) -> AcceleratorConfig:
    if spec == "cpu" or (spec.startswith("cpu:") and _DIGITS.fullmatch(spec[4:])):
        return CpuConfig(spot)  # `cpu:N`: a CPU job; the node's cores are the pool's business, not the job's
    if spec == "gpu":
        return _gpu("l4", 1, spot)
    if spec == "tpu":
        return _tpu("v5litepod", 4, spot)
    kind, separator, body = spec[:3], spec[3:4], spec[4:]
    prefixed = kind in ("gpu", "tpu") and separator in (":", "-")
    if ":" in (body if prefixed else spec):
        raise ValidationError("unexpected ':'; the form is [gpu:|tpu:]SPEC[:spot] with ':spot' at most once, last")
    if prefixed:
        return _parse_gpu(body, spot) if kind == "gpu" else _parse_tpu(spec, body, spot)
    if _DIGITS.fullmatch(spec):
        return _bare_count(spec, spot)
    split_gpu = _split_gpu(spec)
    if split_gpu is not None:
        return _gpu_sized(*split_gpu, spot)
    split_tpu = _split_tpu(spec)
    if split_tpu is not None:
        return _tpu_sized(*split_tpu, spot)
    raise ValidationError(
        f"unknown accelerator name; GPUs are {_GPU_NAMES}; TPUs are {_TPU_NAMES}; or cpu, gpu, tpu, gpu:N, tpu:N"
    )


def parse_accelerator(text: str, spot: bool = False) -> AcceleratorConfig:
    """Parse an `accelerator=` string (case-insensitive, surrounding whitespace ignored); `spot=True` asks
    for preemptible capacity as a `:spot` suffix does.

    Raises `ValidationError` (a `ValueError`) naming the valid choices for whatever name it got.
    """
    if not isinstance(text, str):
        raise ValidationError(f"accelerator must be a string such as 'cpu', 'l4x2' or 'v5e-2x2', not {text!r}")
    if not isinstance(spot, bool):
        raise ValidationError(f"spot must be True or False, not {spot!r}")
    spec = text.strip().lower()
    if spec.endswith(_SPOT):
        spot = True
        spec = spec[: -len(_SPOT)]
    try:
        return _parse_spec(spec, spot)
    except ValidationError as exc:
        raise ValidationError(f"invalid accelerator {_quote(text)}: {exc}") from None


# ---------------------------------------------------------------------------------------------------------
# Queries over configs

_CATEGORIES: dict[type, str] = {CpuConfig: "cpu", GpuConfig: "gpu", TpuConfig: "tpu"}


def category(config: AcceleratorConfig) -> str:
    """`"cpu"`, `"gpu"` or `"tpu"`: what images, node selectors and pools are keyed by."""
    try:
        return _CATEGORIES[type(config)]
    except KeyError:
        raise TypeError(f"not an accelerator config: {config!r}") from None


def get_category(text: str) -> str:
    """`"cpu"`, `"gpu"` or `"tpu"` for an accelerator string (a bad string raises as `parse_accelerator` does)."""
    return category(parse_accelerator(text))


def generate_pool_name(config: AcceleratorConfig) -> str:
    """A fresh GKE node pool name for an accelerator: `gpu-NAME-XXXX` or `tpu-NAME-XXXX`, XXXX random hex.

    CPU work runs on the cluster's default pool, so a CPU config has no pool name (a `TypeError`)."""
    if isinstance(config, (GpuConfig, TpuConfig)):
        return f"{category(config)}-{config.name}-{secrets.token_hex(2)}"
    raise TypeError(f"a node pool name needs a GPU or TPU config, not {config!r}")


def format_accelerator(config: AcceleratorConfig) -> str:
    """The canonical string; `parse_accelerator(format_accelerator(c)) == c` for every registry config."""
    category(config)
    return str(config)


def is_multi_host(config: AcceleratorConfig) -> bool:
    """A multi-host TPU slice needs one process/pod per node (and selects Pathways on GKE)."""
    category(config)
    return config.num_nodes > 1


def all_accelerators() -> list[AcceleratorConfig]:
    """Every shape the registry offers (non-spot), in table order: CPU, then GPUs, then TPUs."""
    gpus = [_gpu(name, count, False) for name, model in _GPUS.items() for count in model.machines]
    tpus = [_tpu(name, chips, False) for name, model in _TPUS.items() for chips in model.slices]
    return [CpuConfig(), *gpus, *tpus]


def _shape(config: AcceleratorConfig) -> tuple[str, int | None, str | None, str | None, str | None]:
    """(name, count, topology, machine type, GKE label) of any config, for flat table rows."""
    if isinstance(config, GpuConfig):
        return config.name, config.count, None, config.machine_type, config.gke_label
    if isinstance(config, TpuConfig):
        return config.name, config.chips, config.topology, config.machine_type, config.gke_accelerator
    return "cpu", None, None, None, None


def list_accelerators() -> list[dict[str, object]]:
    """Rows for the `accelerators` CLI command (JSON-ready; `count` is GPUs or TPU chips)."""
    rows: list[dict[str, object]] = []
    for config in all_accelerators():
        name, count, topology, machine_type, gke_label = _shape(config)
        rows.append(
            {
                "accelerator": str(config),
                "category": category(config),
                "name": name,
                "count": count,
                "topology": topology,
                "machine_type": machine_type,
                "gke_label": gke_label,
                "num_nodes": config.num_nodes,
                "multi_host": is_multi_host(config),
            }
        )
    return rows
