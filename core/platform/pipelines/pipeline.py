"""`Pipeline`: a named DAG of steps with default params and a cache that outlives its runs.

Everything structural (edges, the Kahn plan, fingerprints) is computed once per pipeline, so a rerun costs
one hash and one cache lookup per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.pipelines.cache_key import NOT_JSON, canonical, key_frame
from kinetic_tui.core.platform.pipelines.execution import run_layers
from kinetic_tui.core.platform.pipelines.planner import Node, compile_steps, kahn_layers, names_sorted
from kinetic_tui.core.platform.pipelines.results import PipelineRun
from kinetic_tui.core.platform.pipelines.steps import ConditionStep, Step
from kinetic_tui.core.validation import MAX_SECONDS, require_number


def check_params(field_name: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise ValidationError(f"{field_name} must be a dict of name -> JSON value, got {params!r}")
    for key, value in params.items():
        try:
            canonical(value)
        except NOT_JSON as exc:
            raise ValidationError(f"{field_name}: param {key!r} must be JSON-serialisable ({exc})") from None
    return dict(params)


class Pipeline:
    """A named DAG of steps with default params and a cache that outlives its runs."""

    def __init__(
        self,
        name: str,
        steps: Iterable[Step | ConditionStep],
        params: Mapping[str, Any] | None = None,
        cache: MutableMapping[str, dict[str, Any]] | None = None,
        accelerator: str = "cpu",
        timeout: float | None = None,
        container_image: str | None = None,
    ) -> None:
        """`accelerator` is where steps that name none run as jobs; `timeout` (seconds) bounds a run whose
        steps are jobs: past it, the run is cancelled; `container_image` is what the steps' jobs run in on
        a cluster, as `@run` takes it (None builds the bundled image; a local run ignores it)."""
        if not isinstance(name, str) or not name:
            raise ValidationError(f"pipeline name must be a non-empty string, got {name!r}")
        steps = tuple(steps)
        for i, step in enumerate(steps):
            if not isinstance(step, (Step, ConditionStep)):
                raise ValidationError(
                    f"pipeline {name!r}: steps[{i}] is {type(step).__name__}, expected Step or ConditionStep"
                )
        defaults = check_params(f"pipeline {name!r} params", {} if params is None else params)
        if cache is not None and not isinstance(cache, MutableMapping):
            raise ValidationError(f"pipeline {name!r}: cache must be a MutableMapping, got {type(cache).__name__}")
        if not isinstance(accelerator, str) or not accelerator:
            raise ValidationError(f"pipeline {name!r}: accelerator must be a non-empty string, got {accelerator!r}")
        if container_image is not None and (not isinstance(container_image, str) or not container_image):
            raise ValidationError(
                f"pipeline {name!r}: container_image must be a non-empty image reference or None, "
                f"got {container_image!r}"
            )
        if timeout is not None:
            require_number(f"pipeline {name!r}: timeout", timeout, minimum=0, exclusive=True, maximum=MAX_SECONDS)
        self._nodes = compile_steps(name, steps)
        self._by_name = names_sorted(self._nodes)
        self._known_params = defaults.keys() | {p for node in self._nodes for _, p in node.param_refs}
        self._layers: list[list[int]] | None = None
        self._key_frames: list[tuple[str, str]] | None = None
        self.name = name
        self.steps = steps
        self.params = defaults  # the defaults that run(params) merges over
        self.cache: MutableMapping[str, dict[str, Any]] = {} if cache is None else cache
        self.accelerator = accelerator
        self.timeout = timeout
        self.container_image = container_image

    def _plan(self) -> list[list[int]]:
        if self._layers is None:
            self._layers = kahn_layers(self.name, self._nodes, self._by_name)
        return self._layers

    def compiled(self) -> tuple[list[Node], list[list[int]], list[tuple[str, str]]]:
        """(nodes, Kahn rounds of node indices, cache-key frames): what a driver of job steps walks."""
        layers = self._plan()
        if self._key_frames is None:
            self._key_frames = [key_frame(node.name, node.version) for node in self._nodes]
        return self._nodes, layers, self._key_frames

    def merged_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """`params` over the defaults; ValidationError for unknown or missing names."""
        return self._merge_params(params)

    def layers(self) -> list[list[str]]:
        """The Kahn rounds, each sorted by name: what the console draws as the DAG's layers."""
        nodes = self._nodes
        return [[nodes[i].name for i in layer] for layer in self._plan()]

    def topological_order(self) -> list[str]:
        nodes = self._nodes
        return [nodes[i].name for layer in self._plan() for i in layer]

    def edges(self) -> list[tuple[str, str]]:
        """(producer, consumer) pairs, gate edges included, sorted."""
        nodes = self._nodes
        return sorted((nodes[p].name, node.name) for node in nodes for p in node.producers)

    def _merge_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        given = check_params(f"pipeline {self.name!r} run params", {} if params is None else params)
        known = sorted(self._known_params)
        unknown = sorted(given.keys() - self._known_params)
        if unknown:
            raise ValidationError(
                f"pipeline {self.name!r}: unknown param(s) {', '.join(unknown)}; known params: "
                f"{', '.join(known) or '(none)'}"
            )
        merged = {**self.params, **given}
        missing = sorted(self._known_params - merged.keys())
        if missing:
            raise ValidationError(
                f"pipeline {self.name!r}: param(s) {', '.join(missing)} have no default; pass them to run()"
            )
        return merged

    def run(self, params: Mapping[str, Any] | None = None) -> PipelineRun:
        """Run every step in topological order; raises (changing nothing) only for bad params or a cycle."""
        nodes, layers, frames = self.compiled()
        return run_layers(self.name, nodes, layers, frames, self._merge_params(params), self.cache)
