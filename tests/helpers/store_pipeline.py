"""A small pipeline with a gate, importable by reference ("tests.helpers.store_pipeline:build") from any process."""

from __future__ import annotations

from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, Step


def _prepare(inputs: dict) -> dict:
    return {"rows": [i * 2 for i in range(inputs["n"])]}


def _total(inputs: dict) -> dict:
    return {"total": sum(inputs["rows"])}


def _publish(inputs: dict) -> dict:
    return {"published": inputs["total"]}


def build() -> Pipeline:
    return Pipeline(
        "demo",
        [
            Step("prepare", _prepare, {"n": "params.n"}),
            Step("total", _total, {"rows": "prepare.rows"}),
            ConditionStep(
                "big",
                lambda inputs: inputs["total"] > inputs["limit"],
                {"total": "total.total", "limit": "params.limit"},
            ),
            Step("publish", _publish, {"total": "total.total"}, when=("big", True)),
        ],
        params={"n": 5, "limit": 10},
    )
