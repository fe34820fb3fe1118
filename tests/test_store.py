"""kinetic_tui.core.store: the SQLite layer (pragmas, migrations, transactions, refusal of bad files) and the
repositories, with restarts done by real separate processes (tests/helpers/store_worker.py)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kinetic_tui.core.store.db as store_db
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import state_db_path
from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.pipelines import StepStatus
from kinetic_tui.core.platform.registry import InvalidTransitionError, ModelRegistry, Stage
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.platform.training import (
    CapacityError,
    ManagedTrainingRunner,
    TrainingCluster,
    TrainingJob,
    TrainingStatus,
)
from kinetic_tui.core.platform.tuning import HyperparameterTuner
from kinetic_tui.core.store import Store, StoreError
from tests.helpers.store_worker import PIPELINE_REF, drive_registry

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "helpers" / "store_worker.py"


def run_worker(scenario: str, step: str) -> dict:
    """One restart step in a fresh interpreter: nothing survives but state.db."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(WORKER), scenario, step], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class Echo:
    """A picklable model for the multi-model endpoint."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def predict(self, record: object) -> str:
        return f"{self.tag}:{record}"


@pytest.fixture
def store() -> Iterator[Store]:
    opened = Store()
    yield opened
    opened.close()


def reopen(store: Store) -> Store:
    store.close()
    return Store(store.path)


# --- database layer ------------------------------------------------------------------------------------


def test_fresh_store_is_wal_migrated_and_enforces_foreign_keys(store):
    conn = store.connection
    assert store.path == state_db_path()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    assert store.schema_version() == store_db.MIGRATIONS[-1][0]
    with pytest.raises(sqlite3.IntegrityError), store.transaction() as tx:
        tx.execute("INSERT INTO scaling_events VALUES ('ghost', 0, 0, 1, 1, 1, 'none')")


def test_appended_migration_applies_once_on_next_open(store, monkeypatch):
    target = store_db.MIGRATIONS[-1][0] + 1
    monkeypatch.setattr(store_db, "MIGRATIONS", [*store_db.MIGRATIONS, (target, "CREATE TABLE extra (name TEXT);")])
    store = reopen(store)
    assert store.schema_version() == target
    store.query("SELECT name FROM extra")
    reopen(store).close()  # already there: nothing re-applied (a second CREATE TABLE would fail)


def test_failing_migration_leaves_the_previous_version(store, monkeypatch):
    bad = (store_db.MIGRATIONS[-1][0] + 1, "CREATE TABLE extra (name TEXT);\nINSERT INTO nowhere VALUES (1);")
    path = store.path
    store.close()
    with monkeypatch.context() as patch, pytest.raises(sqlite3.OperationalError, match="nowhere"):
        patch.setattr(store_db, "MIGRATIONS", [*store_db.MIGRATIONS, bad])
        Store(path)
    with Store(path) as again:
        assert again.schema_version() == bad[0] - 1
        assert not again.query("SELECT name FROM sqlite_master WHERE name = 'extra'")


def test_a_checkpoint_copies_the_log_into_the_database_file_and_waits_for_no_transaction(store, tmp_path):
    """`checkpoint` is for a process about to wait: afterwards the database file alone holds what was
    committed (a copy without its -wal file reads it); inside a transaction it does nothing."""
    store.checkpoint()  # the schema, written by the migrations
    store.connection.execute("PRAGMA wal_autocheckpoint = 0")  # only our call copies the log from here
    with store.transaction():
        store.pipelines.cache["a"] = {"x": 1}
        store.checkpoint()
    store.pipelines.cache["b"] = {"x": 2}
    copy = tmp_path / "copy.db"

    def file_alone() -> list[str]:
        copy.write_bytes(store.path.read_bytes())
        with contextlib.closing(sqlite3.connect(copy)) as conn:
            return sorted(key for (key,) in conn.execute("SELECT key FROM step_cache"))

    assert file_alone() == []
    store.checkpoint()
    assert file_alone() == ["a", "b"]


def _count(store: Store) -> int:
    return store.query("SELECT COUNT(*) FROM step_cache")[0][0]


def test_transaction_commits_or_rolls_back_everything(store):
    with store.transaction():
        store.pipelines.cache["a"] = {"x": 1}
        store.pipelines.cache["b"] = {"x": 2}
    with pytest.raises(RuntimeError), store.transaction():
        store.pipelines.cache["c"] = {"x": 3}
        del store.pipelines.cache["a"]
        raise RuntimeError("action failed")
    assert sorted(reopen(store).pipelines.cache) == ["a", "b"]


def test_nested_transaction_joins_the_outer_one(store):
    other = sqlite3.connect(store.path)
    with store.transaction():
        with store.transaction():
            store.pipelines.cache["inner"] = {}
        assert store.in_transaction
        assert other.execute("SELECT COUNT(*) FROM step_cache").fetchone()[0] == 0  # not committed yet
        with contextlib.suppress(KeyError), store.transaction():
            store.pipelines.cache["undone"] = {}
            raise KeyError("inner failure, caught by the action")
    assert not store.in_transaction
    assert [k for (k,) in other.execute("SELECT key FROM step_cache")] == ["inner"]
    with pytest.raises(RuntimeError), store.transaction():
        with store.transaction():
            store.pipelines.cache["late"] = {}
        raise RuntimeError("outer fails after the inner block succeeded")
    assert list(store.pipelines.cache) == ["inner"]
    other.close()


def test_threads_get_their_own_connection_and_serialise(store):
    connections = set()

    def work(tag: int) -> None:
        connections.add(id(store.connection))
        for n in range(20):
            with store.transaction():
                store.pipelines.cache[f"{tag}-{n}"] = {"n": n}

    threads = [threading.Thread(target=work, args=(tag,)) for tag in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(connections) == 4
    assert _count(store) == 80


def test_not_a_database_is_refused_untouched(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"this is a text file, not SQLite " * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError) as info:
        Store(path)
    assert str(path) in str(info.value) and "move it aside" in str(info.value)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == before


def test_damaged_pages_fail_quick_check_and_are_left_as_is(store):
    for n in range(300):
        store.pipelines.cache[f"key-{n:04d}"] = {"payload": "x" * 200}
    store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = store.path
    store.close()
    data = bytearray(path.read_bytes())
    page = 4096
    data[3 * page : 5 * page] = b"\xff" * (2 * page)  # clobber two b-tree pages, keep the header
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="not a usable kinetic state database"):
        Store(path)
    assert path.read_bytes() == bytes(data)


def test_newer_schema_is_refused_untouched(store):
    store.connection.execute("PRAGMA user_version = 99")
    path = store.path
    store.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"schema version 99 .* upgrade kinetic-tui"):
        Store(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf", "nan"])
def test_a_bad_lock_timeout_in_the_environment_is_refused_naming_it(store, monkeypatch, value):
    monkeypatch.setenv("KINETIC_STORE_TIMEOUT", value)
    with pytest.raises(ValidationError, match=r"KINETIC_STORE_TIMEOUT=.* is invalid: give a positive number"):
        Store(store.path)


def test_the_lock_timeout_comes_from_the_environment_or_defaults_to_30s(store, monkeypatch):
    assert Store(store.path).timeout == 30.0
    monkeypatch.setenv("KINETIC_STORE_TIMEOUT", "2.5")
    assert Store(store.path).timeout == 2.5


def test_lock_outlasting_the_timeout_is_a_store_error(store):
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO step_cache VALUES ('held', '{}')")
    waiting = Store(store.path, timeout=0.2)
    with pytest.raises(StoreError, match=r"is locked by another process for more than 0.2s"), waiting.transaction():
        waiting.pipelines.cache["mine"] = {}
    holder.execute("ROLLBACK")
    holder.close()
    with waiting.transaction():
        waiting.pipelines.cache["mine"] = {}
    assert list(waiting.pipelines.cache) == ["mine"]
    waiting.close()


# --- step cache --------------------------------------------------------------------------------------------


def test_step_cache_is_a_mutable_mapping_of_json_dicts(store):
    cache = store.pipelines.cache
    cache["k1"] = {"rows": [1, 2], "name": "a"}
    cache["k1"] = {"rows": [3]}
    cache["k2"] = {}
    assert cache["k1"] == {"rows": [3]} and len(cache) == 2 and "k2" in cache and "k3" not in cache
    assert cache.get("missing") is None
    del cache["k2"]
    with pytest.raises(KeyError):
        del cache["k2"]
    with pytest.raises(ValidationError, match="not JSON-serialisable"):
        cache["k3"] = {"bad": object()}
    assert list(cache) == ["k1"]


# --- restarts in separate processes ------------------------------------------------------------------------


def test_pipeline_rerun_after_restart_hits_the_cache():
    first = run_worker("pipeline", "first")
    second = run_worker("pipeline", "second")
    assert first["number"] == 1 and set(first["steps"].values()) == {"Executed"}
    assert second["number"] == 2 and set(second["steps"].values()) == {"Cached"}
    with Store() as store:
        runs = store.pipelines.runs("demo")
        assert [stored.number for stored in runs] == [1, 2]
        assert list(runs[0].run.steps) == store.pipelines.load("demo").topological_order()
        assert runs[0].run.steps["publish"].outputs == {"published": 20}
        assert all(r.status is StepStatus.CACHED for r in runs[1].run.steps.values())
        assert store.pipelines.definition("demo") == (PIPELINE_REF, {"n": 5, "limit": 10})
        changed = store.pipelines.load("demo").run({"n": 6})
        assert changed.steps["prepare"].status is StepStatus.EXECUTED


def test_stopped_training_resumed_after_restart_matches_the_straight_run():
    stopped = run_worker("training", "first")
    assert stopped["status"] == "Stopped" and stopped["checkpoint"]["epoch"] == 2
    resumed = run_worker("training", "second")
    straight = TrainingJob("bert", {"learning_rate": 0.2}, max_epochs=6, checkpoint_every=2)
    ManagedTrainingRunner(TrainingCluster(1)).start(straight)
    assert resumed["status"] == "Completed" and resumed["interruptions"] == 1
    assert resumed["artifact_hash"] == straight.artifact_hash
    with Store() as store:
        assert store.training.get("bert").artifact_hash == straight.artifact_hash


def test_endpoint_after_restart_keeps_cooldown_and_tick_order():
    first = run_worker("endpoint", "first")
    second = run_worker("endpoint", "second")
    original = Endpoint(
        "api", min_instances=1, max_instances=5, target_per_instance=10, scale_out_cooldown=3, scale_in_cooldown=5
    )
    original.observe(45, 0)
    original.observe(5, 1)  # within scale-in cooldown: hold
    assert first["instance_count"] == 5
    assert second["history"] == [list(event) for event in original.history]
    with Store() as store:
        rebuilt = store.endpoints.get("api")
        assert rebuilt.history == original.history
        with pytest.raises(ValueError):
            rebuilt.observe(5, 0)  # earlier than the last tick
        assert rebuilt.observe(5, 9) == original.observe(5, 9) == 1
        store.endpoints.save(rebuilt)
        assert store.query("SELECT COUNT(*) FROM scaling_events")[0][0] == 3


def test_registry_rebuilt_after_restart_is_identical():
    run_worker("registry", "first")
    expected = ModelRegistry(clock=itertools.count(1000).__next__)
    drive_registry(expected, contextlib.nullcontext)
    with Store() as store:
        rebuilt = store.registry.load_registry()
    assert rebuilt.groups() == expected.groups() == ["churn", "fraud"]
    for group in expected.groups():
        assert rebuilt.versions(group) == expected.versions(group)
        assert rebuilt.history(group) == expected.history(group)
        assert rebuilt.get_latest_production(group) == expected.get_latest_production(group)
    assert rebuilt.get_latest_production("fraud").version == 2


# --- repositories in-process ------------------------------------------------------------------------------


def test_failing_action_leaves_nothing_behind(store):
    registry = store.registry.load_registry()
    endpoint = Endpoint("api")
    with store.transaction():
        registry.register("fraud", "h1")
    with pytest.raises(InvalidTransitionError), store.transaction():
        endpoint.observe(50, 1)
        store.endpoints.save(endpoint)
        registry.register("fraud", "h2")
        registry.transition("fraud", 1, "Production")  # None -> Production is not an edge
    with pytest.raises(RuntimeError), store.transaction():
        registry.transition("fraud", 1, "Staging")
        store.pipelines.cache["k"] = {}
        raise RuntimeError("crash after the writes")
    store = reopen(store)
    assert [v.version for v in store.registry.load_registry().versions("fraud")] == [1]
    assert store.registry.load_registry().versions("fraud")[0].stage is Stage.NONE
    assert store.endpoints.names() == [] and len(store.pipelines.cache) == 0
    store.close()


@settings(max_examples=30)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6), st.sampled_from(list(Stage)), st.booleans()), max_size=25)
)
def test_any_registry_history_survives_a_reopen(tmp_path_factory, actions):
    path = tmp_path_factory.mktemp("prop") / "state.db"
    with Store(path) as store:
        registry = store.registry.attach(ModelRegistry(clock=itertools.count().__next__))
        for group, version, stage, archive in actions:
            name = f"g{group}"
            known = len(registry.versions(name)) if name in registry.groups() else 0
            with contextlib.suppress(InvalidTransitionError), store.transaction():
                if version > known:
                    registry.register(name, f"h{version}")
                else:
                    registry.transition(name, version, stage, archive_existing=archive)
    with Store(path) as store:
        rebuilt = store.registry.load_registry()
    assert rebuilt.groups() == registry.groups()
    for name in registry.groups():
        assert rebuilt.versions(name) == registry.versions(name)
        assert rebuilt.history(name) == registry.history(name)
        assert rebuilt.get_latest_production(name) == registry.get_latest_production(name)


def test_training_load_adopts_holders_and_refuses_a_too_small_cluster(store):
    cluster = TrainingCluster(3)
    runner = ManagedTrainingRunner(cluster)
    jobs = {name: TrainingJob(name, {}, 4, 1) for name in ("done", "stopped", "pending")}
    runner.start(jobs["done"])
    runner.start(jobs["stopped"], interrupt_before_epoch=3)
    for job in jobs.values():
        store.training.save(job)
    store = reopen(store)
    fresh = TrainingCluster(2)
    loaded = store.training.load(fresh)
    assert fresh.holders == {"stopped"}
    assert {n: j.to_record() for n, j in loaded.items()} == {n: j.to_record() for n, j in jobs.items()}
    assert loaded["stopped"].status is TrainingStatus.STOPPED
    busy = TrainingCluster(2)
    for name in ("x", "y"):
        busy.place(TrainingJob(name, {}, 1, 1))
    with pytest.raises(CapacityError, match="2 instances, 2 in use, too few for 1 restored .*: stopped"):
        store.training.load(busy)
    assert busy.holders == {"x", "y"}
    with pytest.raises(LookupError, match="known: done, pending, stopped"):
        store.training.get("nope")
    store.close()


def test_tuning_study_round_trips(store):
    tuner = HyperparameterTuner(
        {"learning_rate": [0.1, 0.3, 0.5], "depth": [1, 2]}, strategy="bayesian", max_trials=4, max_epochs=3
    )
    result = tuner.run()
    store.tuning.save("lr-sweep", tuner)
    store.tuning.save("lr-sweep", tuner)  # replacing a study keeps one copy of each trial
    store = reopen(store)
    stored = store.tuning.get("lr-sweep")
    assert stored.result == result and stored.result.best == result.best
    assert stored.config["strategy"] == "bayesian" and stored.config["budget"] == 4
    assert store.query("SELECT COUNT(*) FROM tuning_trials")[0][0] == 4
    store.close()


def test_multimodel_state_and_events_round_trip_appending_only_new_events(store):
    endpoint = MultiModelEndpoint(2)
    for name in ("a", "b", "c"):
        endpoint.register(name, Echo(name))
    for name in ("a", "b", "a", "c"):
        endpoint.invoke(name, 1)
    store.endpoints.save_multimodel("api", endpoint)
    endpoint.invoke("b", 2)
    store.endpoints.save_multimodel("api", endpoint)
    store = reopen(store)
    rebuilt = store.endpoints.get_multimodel("api")
    assert (rebuilt.loaded, rebuilt.hits, rebuilt.misses) == (endpoint.loaded, endpoint.hits, endpoint.misses)
    assert (rebuilt.load_events, rebuilt.evict_events) == (endpoint.load_events, endpoint.evict_events)
    assert list(rebuilt.models) == list(endpoint.models)
    assert rebuilt.invoke("c", 7) == endpoint.invoke("c", 7) == "c:7"
    assert store.query("SELECT COUNT(*) FROM multimodel_events")[0][0] == 4 + 2  # 4 loads, 2 evictions
    store.close()
