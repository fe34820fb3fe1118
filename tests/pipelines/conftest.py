"""Pipelines whose steps are jobs: a user project holding the pipelines, and a home whose supervisor (the
runs' driver) is stopped when the test ends."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.supervisor import process as supervisor
from kinetic_tui.script import run_script
from tests.helpers import projects

MODULE = """
import os, time
from pathlib import Path
from kinetic_tui import ConditionStep, Pipeline, Step

MARKS = Path(os.environ["PIPE_MARKS"])


def mark(name):
    with open(MARKS / f"{name}.log", "a") as out:
        out.write(f"{time.time()}\\n")


def meeting(name, other):
    # marks its start, then ends only once `other` has started: it fails if the two never ran at once
    def step(inputs):
        mark(name)
        deadline = time.monotonic() + 60
        while not (MARKS / f"{other}.log").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{other} did not start while {name} ran")
            time.sleep(0.02)
        return {"done": name}
    return step


def parallel():
    return Pipeline("parallel", [Step("a", meeting("a", "b")), Step("b", meeting("b", "a")),
                                 Step("join", lambda i: {"both": [i["a"], i["b"]]}, {"a": "a.done", "b": "b.done"})])


def gate(name):
    # runs until the test creates MARKS/release-NAME: the clock here cannot be trusted
    def step(inputs):
        mark(name)
        while not (MARKS / f"release-{name}").exists():
            time.sleep(0.02)
        return {"done": name}
    return step


def slow():
    return Pipeline("slow", [Step("wait", gate("wait")),
                             Step("after", lambda i: {"seen": i["x"]}, {"x": "wait.done"})])


def blob(inputs):
    mark("blob")
    return {"data": bytes(range(256)) * 4, "big": list(range(20000)), "small": 3}


def also_blob(inputs):
    return {"data": bytes(range(256)) * 4}


def size(inputs):
    mark("size")
    return {"n": len(inputs["data"]), "total": sum(inputs["big"])}


def artifacts():
    return Pipeline("artifacts", [Step("make", blob), Step("again", also_blob),
                                  Step("size", size, {"data": "make.data", "big": "make.big"}),
                                  Step("size2", size, {"data": "again.data", "big": "make.big"})])


def flaky(inputs):
    mark("flaky")
    if len((MARKS / "flaky.log").read_text().splitlines()) < 2:
        raise RuntimeError("first attempt fails")
    return {"ok": True}


def broken(inputs):
    mark("broken")
    raise ValueError("no data")


def failing():
    return Pipeline("failing", [Step("flaky", flaky, retries=1), Step("broken", broken, retries=1),
                                Step("child", lambda i: {"x": i["v"]}, {"v": "broken.x"}),
                                Step("grandchild", lambda i: {"y": 1}, {"v": "child.x"}),
                                ConditionStep("gate", lambda i: False, {"ok": "flaky.ok"}),
                                Step("gated", lambda i: {"z": 1}, {"ok": "flaky.ok"}, when=("gate", True))])


def listy():
    return Pipeline("listy", [Step("bad", lambda i: [1, 2])])


def nowhere():
    return Pipeline("nowhere", [Step("tpu", lambda i: {}, accelerator="v5e-2x2")])


def placed():
    return Pipeline("placed", [Step("only", lambda i: {})], accelerator="v5e-2x2", timeout=30.0,
                    container_image="img:1")


def chained():
    return Pipeline("chained", [Step("first", gate("first")),
                                Step("second", lambda i: {"version": "old", "got": i["x"]}, {"x": "first.done"})])
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path) -> Iterator[Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("PIPE_MARKS", str(marks))
    root = projects.user_project(tmp_path, monkeypatch, "pipe_user", MODULE)
    try:
        yield root
    finally:
        supervisor.stop(kinetic_home)


def release(name: str) -> None:
    import os

    (Path(os.environ["PIPE_MARKS"]) / f"release-{name}").touch()


def marks(name: str) -> list[float]:
    import os

    path = Path(os.environ["PIPE_MARKS"]) / f"{name}.log"
    return [float(line) for line in path.read_text().splitlines()] if path.exists() else []


def script(text: str, **kwargs: Any) -> tuple[int, list[dict[str, Any]]]:
    out = io.StringIO()
    code = run_script(text, output="json", stdout=out, stderr=io.StringIO(), keep_going=True, **kwargs)
    return code, [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]


def run(coro: Any) -> Any:
    return asyncio.run(coro)
