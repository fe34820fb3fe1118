"""A workspace made before the one `kinetic_tui` namespace opens and works: migration 6 rewrites its stored
module paths (pipeline references, step references, models pickled by class path).

The fixture is the state.db of a home that ran examples/tour.kn with version 0.1.0 (a pipeline registered as
`core.platform.canonical:canonical_pipeline`, an endpoint serving a pickled `core.console.served_model`
model, trainings, a study and their jobs). The end-to-end check runs in a process whose cwd is outside the
checkout, as a user's would be: there, an old `core.…` path cannot resolve by accident.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import pickle
import pickletools
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kinetic_tui.core.console import served_model
from kinetic_tui.core.console.served_model import VersionModel
from kinetic_tui.core.store import module_moves
from kinetic_tui.core.store.db import Database
from kinetic_tui.core.store.migrations import MIGRATIONS

FIXTURE = Path(__file__).parent / "fixtures" / "home-0.1.0-state.db.gz"
RECORD = {"amount": 42, "country": "NL"}


def fixture_home(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    (home / "state.db").write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return home


def modules_named(blob: bytes) -> set[str]:
    """Every string a pickle stream pushes or names as a GLOBAL's module (what find_class would import)."""
    names = set()
    for opcode, arg, _ in pickletools.genops(blob):
        if isinstance(arg, str):
            names.add(arg.partition(" ")[0] if opcode.name == "GLOBAL" else arg)
    return names


def test_the_fixture_was_made_by_the_previous_layout(tmp_path: Path) -> None:
    conn = sqlite3.connect(fixture_home(tmp_path / "home") / "state.db")
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT ref FROM pipelines").fetchall() == [("core.platform.canonical:canonical_pipeline",)]
        (blob,) = conn.execute("SELECT model FROM multimodel_models").fetchone()
        assert "core.console.served_model" in modules_named(blob)
    finally:
        conn.close()


def test_opening_the_store_rewrites_every_old_module_path(tmp_path: Path) -> None:
    home = fixture_home(tmp_path / "home")
    with Database(home / "state.db") as db:
        assert db.schema_version() == MIGRATIONS[-1][0] >= 6
        assert db.query("SELECT ref FROM pipelines") == [("kinetic_tui.core.demo.canonical:canonical_pipeline",)]
        ((blob,),) = db.query("SELECT model FROM multimodel_models")
        ((group, version, artifact, metrics),) = db.query(
            "SELECT group_name, version, artifact_hash, metrics FROM model_versions"
        )
        dumped = (
            db.query("SELECT * FROM jobs")
            + db.query("SELECT * FROM training_runs")
            + db.query("SELECT * FROM tuning_runs")
            + db.query("SELECT * FROM pipeline_runs")
        )
    assert "kinetic_tui.core.serving.version" in modules_named(blob)  # re-pickled: the class moved there since
    assert not modules_named(blob) & module_moves.MOVED.keys()
    assert pickle.loads(blob) == VersionModel(group, version, artifact, json.loads(metrics)["metric"])
    assert not any(f"{old}:" in json.dumps(dumped) for old in module_moves.MOVED)


def test_the_migrated_home_works_from_a_user_process(tmp_path: Path) -> None:
    """models, pipelines, a rerun that hits the cache for every step, the endpoint's answer, jobs, trainings."""
    home = fixture_home(tmp_path / "home")
    script = textwrap.dedent(f"""
        import asyncio, json
        from kinetic_tui.core.console import Console

        async def main():
            console = Console(home={str(home)!r})
            try:
                groups = await console.registry.models()
                pipelines = await console.pipelines.list()
                rerun = await console.pipelines.rerun("canonical")
                try:
                    await console.endpoints.invoke("tour-endpoint", "tour-group:v1", {RECORD!r})
                    refused = ""
                except Exception as exc:  # an endpoint made before endpoints served: no router to ask
                    refused = str(exc)
                jobs = await console.jobs.list()
                trainings = await console.training.list()
            finally:
                await console.aclose()
            print("RESULT " + json.dumps({{
                "groups": [g.group for g in groups], "pipelines": [p.name for p in pipelines],
                "executed": list(rerun.executed), "statuses": sorted({{s.status for s in rerun.steps}}),
                "refused": refused, "jobs": len(jobs), "trainings": [t.name for t in trainings]}}))

        asyncio.run(main())
    """)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    env["KINETIC_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=outside, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    assert result["groups"] == ["tour-group"] and result["pipelines"] == ["canonical"]
    assert result["executed"] == [] and set(result["statuses"]) <= {"Cached", "Skipped"}
    assert "created before endpoints served over HTTP" in result["refused"]
    assert result["jobs"] == 5
    assert result["trainings"] == ["tour-model", "tour-study.trial-1", "tour-study.trial-2", "tour-study.trial-3"]


@pytest.mark.parametrize(
    ("ref", "moved"),
    [
        ("core.platform.canonical:canonical_pipeline", "kinetic_tui.core.demo.canonical:canonical_pipeline"),
        ("core.platform.training:default_train_step", "kinetic_tui.core.platform.training:default_train_step"),
        ("core.training_runs:x.y", "kinetic_tui.core.training.service:x.y"),
        ("runner.remote_runner:main", "kinetic_tui.runner.remote_runner:main"),
        # a user's own packages named like ours keep their references: only modules of the old layout move
        ("core.steps:train_step", "core.steps:train_step"),
        ("runner.jobs:go", "runner.jobs:go"),
        ("mypkg.steps:train_step", "mypkg.steps:train_step"),
        (None, None),
    ],
)
def test_references_move_only_for_modules_of_the_old_layout(ref: str | None, moved: str | None) -> None:
    assert module_moves.moved_reference(ref) == moved


def test_every_new_module_path_exists() -> None:
    """The table is frozen with the migration; a later move of one of these modules needs a new migration."""
    missing = [new for new in module_moves.MOVED.values() if importlib.util.find_spec(new) is None]
    assert not missing


@pytest.mark.parametrize("protocol", [0, 2, 4])  # GLOBAL below protocol 4, STACK_GLOBAL from it
def test_a_pickle_naming_an_old_module_is_loaded_and_pickled_again(monkeypatch, protocol: int) -> None:
    model = VersionModel("g", 3, "ab" * 32, 0.5)
    # a context of its own: `monkeypatch.undo()` would also undo the suite's KINETIC_HOME for this test
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "core.console.served_model", served_model)
        patch.setattr(VersionModel, "__module__", "core.console.served_model")
        old = pickle.dumps(model, protocol=protocol)
    assert "core.console.served_model" in modules_named(old)
    moved = module_moves.moved_pickle(old)
    assert "core.console.served_model" not in modules_named(moved)
    assert pickle.loads(moved) == model


def test_other_pickles_are_left_byte_for_byte() -> None:
    plain = pickle.dumps({"core.jobs-like text": [1, 2]})
    assert module_moves.moved_pickle(plain) == plain
    broken = b"ccore.jobs\nNope\n."  # GLOBAL core.jobs Nope
    assert module_moves.moved_pickle(broken) == broken  # names an old module, but cannot be loaded
