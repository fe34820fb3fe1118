"""Shared set-up for the console and script tests: a user project on disk (the cwd), with job functions
and a small pipeline that `submit` / `pipeline register` import by reference, as a user's would be."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import projects

USER_MODULE = """
import time

from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, Step


def add(a, b):
    print(f"adding {a} and {b}")
    return a + b


def boom():
    raise ValueError("boom")


def sleepy(seconds):
    time.sleep(seconds)
    return seconds


def double(inputs):
    return {"value": inputs["x"] * 2}


def is_big(inputs):
    return inputs["value"] > 10


def plus_one(inputs):
    return {"value": inputs["value"] + 1}


def tiny():
    return Pipeline("tiny", [Step("double", double, {"x": "params.x"}),
                             ConditionStep("big", is_big, {"value": "double.value"}),
                             Step("plus_one", plus_one, {"value": "double.value"}, when=("big", True))],
                    {"x": 3})
"""


NO_RUNS = "pipeline 'tiny' has no runs to rerun; start one with: pipeline run tiny"


@pytest.fixture
def user_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project dir as the cwd, its module importable as `console_user` (re-imported per test)."""
    return projects.user_project(tmp_path, monkeypatch, "console_user", USER_MODULE)


def seed_registry(group: str = "fraud", versions: int = 2) -> None:
    """Versions without training runs, for tests about the registry and endpoints alone."""
    from kinetic_tui.core.backends.local.workspace import store

    db = store()
    with db.transaction():
        registry = db.registry.load_registry()
        for number in range(1, versions + 1):
            registry.register(group, f"{number:x}" * 64, {"metric": number / 10}, "seed")


def state_dump() -> dict[str, list[Any]]:
    """Every row of every table: what 'changes nothing' is checked against."""
    from kinetic_tui.core.backends.local.workspace import store

    db = store()
    tables = [name for (name,) in db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {table: db.query(f"SELECT * FROM {table}") for table in tables}


_JOB_ID = re.compile(r"job-[0-9a-f]{8}")
_DURATION = re.compile(r"\(\d+\.\d+s\)")
_TIME_KEYS = {"created_at", "started_at", "finished_at", "at", "duration", "seconds", "port", "pid", "router_pid"}
_LOCAL_PORT = re.compile(r"127\.0\.0\.1:\d+")
_PID = re.compile(r"pid \d+")
_SERVING_KEYS = ("url", "token_file", "wanted", "pool", "port", "tick_seconds")


def normalise(value: Any, home: str, ids: dict[str, str] | None = None) -> Any:
    """Replace what differs between runs (job ids, times, the home path) so output can be golden."""
    ids = {} if ids is None else ids
    if isinstance(value, dict):
        if "router_pid" in value:  # an endpoint's serving: its processes and live figures differ every run
            value = {key: value[key] for key in _SERVING_KEYS if key in value}
        return {
            key: (0 if key in _TIME_KEYS and isinstance(item, (int, float)) else normalise(item, home, ids))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalise(item, home, ids) for item in value]
    if isinstance(value, str):
        text = _JOB_ID.sub(lambda m: ids.setdefault(m.group(), f"job-{len(ids) + 1}"), value)
        text = _PID.sub("pid N", _LOCAL_PORT.sub("127.0.0.1:PORT", text))
        return _DURATION.sub("(N s)", text.replace(home, "$KINETIC_HOME"))
    return value


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
