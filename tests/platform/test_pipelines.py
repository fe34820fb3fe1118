"""Pipelines: planning, construction errors, the cache contract, gates, failures, persistence."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.platform.pipelines import (
    ConditionStep,
    CycleError,
    Pipeline,
    PipelineRun,
    RunStatus,
    Step,
    StepResult,
    StepStatus,
    code_fingerprint,
    compute_cache_key,
)

NAMES = st.text(alphabet="abcxyz_", min_size=1, max_size=4)


def combine(inputs: dict) -> dict:
    """Equal input values give equal outputs, and `% 2` makes different inputs collide often."""
    return {"out": sum(inputs.values()) % 2}


def const(value):
    return lambda inputs: {"out": value}


def ref_inputs(producers: list[str]) -> dict[str, str]:
    return {f"in_{p}": f"{p}.out" for p in producers}


# --- planning -------------------------------------------------------------------------------------------


@st.composite
def dags(draw, max_nodes: int = 25):
    """(names, parents): node i reads a set of earlier nodes; names are shuffled relative to the indices."""
    n = draw(st.integers(1, max_nodes))
    names = draw(st.lists(NAMES, min_size=n, max_size=n, unique=True))
    parents = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    return names, parents


def networkx_order(names: list[str], edges: list[tuple[str, str]]) -> list[str]:
    graph = nx.DiGraph()
    graph.add_nodes_from(names)
    graph.add_edges_from(edges)
    return [node for generation in nx.topological_generations(graph) for node in sorted(generation)]


@given(dags(), st.randoms(use_true_random=False))
def test_topological_order_matches_networkx_generations(dag, rng):
    names, parents = dag
    steps = [Step(name, combine, ref_inputs([names[p] for p in parents[i]])) for i, name in enumerate(names)]
    rng.shuffle(steps)  # consumers may come before their producers
    pipeline = Pipeline("p", steps)
    edges = [(names[p], names[i]) for i in range(len(names)) for p in parents[i]]
    assert pipeline.topological_order() == networkx_order(names, edges)
    assert [n for layer in pipeline.layers() for n in layer] == pipeline.topological_order()
    assert sorted(pipeline.edges()) == sorted(edges)


def test_kahn_rounds_emit_independent_nodes_before_later_rounds():
    steps = [Step("b", combine, {"x": "a.out"}), Step("c", const(1)), Step("a", const(1))]
    pipeline = Pipeline("p", steps)
    assert pipeline.topological_order() == ["a", "c", "b"]
    assert pipeline.layers() == [["a", "c"], ["b"]]


def test_a_gated_step_comes_after_its_gate():
    steps = [
        ConditionStep("gate", lambda i: True, {"x": "a.out"}),
        Step("a", const(1)),
        Step("b", const(2), when=("gate", True)),
    ]
    assert Pipeline("p", steps).topological_order() == ["a", "gate", "b"]


@given(
    st.integers(1, 10).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=20),
            st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True),
        )
    )
)
def test_a_cycle_raises_cycle_error_naming_a_real_cycle(graph):
    n, random_edges, loop = graph
    edges = set(random_edges) | {(loop[k], loop[(k + 1) % len(loop)]) for k in range(len(loop))}
    names = [f"n{i}" for i in range(n)]
    steps = [Step(names[i], combine, ref_inputs(sorted(names[p] for p, c in edges if c == i))) for i in range(n)]
    pipeline = Pipeline("p", steps)
    with pytest.raises(CycleError) as caught:
        pipeline.topological_order()
    cycle = caught.value.cycle
    named = {(names[p], names[c]) for p, c in edges}
    assert len(set(cycle)) == len(cycle) >= 1
    assert all((cycle[k], cycle[(k + 1) % len(cycle)]) in named for k in range(len(cycle)))
    assert all(name in str(caught.value) for name in cycle)
    with pytest.raises(CycleError):
        pipeline.run()


def test_a_long_chain_given_consumers_first_plans_without_recursion_limits():
    n = 5 * sys.getrecursionlimit()
    steps = [Step(f"s{i:05d}", combine, {"x": f"s{i - 1:05d}.out"} if i else {}) for i in reversed(range(n))]
    pipeline = Pipeline("p", steps)
    assert pipeline.topological_order() == [f"s{i:05d}" for i in range(n)]
    assert pipeline.run().executed() == pipeline.topological_order()


def test_cycle_error_reports_the_cycle_not_its_downstream_nodes():
    steps = [
        Step("a", combine, {"x": "c.out"}),
        Step("b", combine, {"x": "a.out"}),
        Step("c", combine, {"x": "b.out"}),
        Step("d", combine, {"x": "c.out"}),
        Step("e", const(1)),
    ]
    with pytest.raises(CycleError, match=r"'p' has a cycle: .*") as caught:
        Pipeline("p", steps).topological_order()
    assert sorted(caught.value.cycle) == ["a", "b", "c"]
    assert isinstance(caught.value, ValueError)


def test_a_gate_edge_can_close_a_cycle():
    steps = [ConditionStep("gate", lambda i: True, {"x": "b.out"}), Step("b", const(1), when=("gate", True))]
    with pytest.raises(CycleError) as caught:
        Pipeline("p", steps).run()
    assert sorted(caught.value.cycle) == ["b", "gate"]


# --- construction errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "needles"),
    [
        ([Step("a", combine, {"x": "ghost.out"})], ["'a'", "'ghost'", "ghost.out"]),
        ([Step("a", const(1)), Step("a", const(2))], ["duplicate", "'a'"]),
        ([Step("a", const(1)), Step("b", const(1), when=("a", True))], ["'b'", "'a'", "ConditionStep"]),
        ([Step("b", const(1), when=("nope", False))], ["'b'", "'nope'"]),
    ],
)
def test_bad_references_raise_value_error_naming_step_and_reference(steps, needles):
    with pytest.raises(ValueError) as caught:
        Pipeline("p", steps)
    assert all(needle in str(caught.value) for needle in needles)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: Step("a.b", combine), "'a.b'"),
        (lambda: Step("params", combine), "'params'"),
        (lambda: Step("", combine), "non-empty"),
        (lambda: Step("a", 42), "fn must be callable"),
        (lambda: ConditionStep("a", None), "predicate must be callable"),
        (lambda: Step("a", combine, {"x": "noreference"}), "'noreference'"),
        (lambda: Step("a", combine, {"x": "b."}), "'b.'"),
        (lambda: Step("a", combine, {"x": 3}), "'params.NAME' or 'STEP.OUTPUT'"),
        (lambda: Step("a", combine, ["b.out"]), "inputs must be a dict"),
        (lambda: Step("a", combine, when=("gate", "yes")), "(GATE, True|False)"),
        (lambda: Step("a", combine, version=3), "version"),
    ],
)
def test_malformed_steps_are_rejected_on_construction(make, needle):
    with pytest.raises(ValueError) as caught:
        make()
    assert needle in str(caught.value)


def test_pipeline_arguments_are_validated():
    with pytest.raises(ValueError, match="pipeline name"):
        Pipeline("", [])
    with pytest.raises(ValueError, match=r"steps\[1\] is int"):
        Pipeline("p", [Step("a", combine), 1])
    with pytest.raises(ValueError, match="cache must be a MutableMapping"):
        Pipeline("p", [], cache=[])
    with pytest.raises(ValueError, match="param 'x' must be JSON-serialisable"):
        Pipeline("p", [], {"x": object()})
    with pytest.raises(ValueError, match="pass version= explicitly"):
        Pipeline("p", [Step("a", dict)])
    assert Pipeline("p", [Step("a", dict, version="builtin-dict")]).run().steps["a"].status is StepStatus.EXECUTED


def test_the_step_keeps_its_own_copy_of_inputs():
    inputs = {"x": "params.x"}
    step = Step("a", combine, inputs)
    inputs["y"] = "ghost.out"
    assert Pipeline("p", [step], {"x": 1}).run().status is RunStatus.SUCCEEDED


# --- params ----------------------------------------------------------------------------------------------


def test_run_params_merge_over_defaults_and_unknown_names_are_rejected():
    pipeline = Pipeline("p", [Step("a", combine, {"x": "params.x", "y": "params.y"})], {"x": 1, "y": 2})
    assert pipeline.run({"y": 4}).params == {"x": 1, "y": 4}
    assert pipeline.params == {"x": 1, "y": 2}
    before = dict(pipeline.cache)
    with pytest.raises(ValueError, match=r"unknown param\(s\) z; known params: x, y"):
        pipeline.run({"z": 1})
    with pytest.raises(ValueError, match="param 'y' must be JSON-serialisable"):
        pipeline.run({"y": {1, 2}})
    assert pipeline.cache == before


def test_a_read_param_without_default_must_be_passed():
    pipeline = Pipeline("p", [Step("a", combine, {"x": "params.x"})])
    with pytest.raises(ValueError, match=r"param\(s\) x have no default"):
        pipeline.run()
    assert pipeline.cache == {}
    assert pipeline.run({"x": 3}).steps["a"].outputs == {"out": 1}


# --- the cache contract ----------------------------------------------------------------------------------


def test_cache_key_is_sha256_of_canonical_json():
    inputs = {"b": [1, 2], "a": {"z": 1, "y": None}}
    expected_json = json.dumps(
        {"inputs": inputs, "name": "s", "params": {"p": 1.5}, "version": "v1"}, sort_keys=True, separators=(",", ":")
    )
    key = compute_cache_key("s", inputs, {"p": 1.5}, "v1")
    assert key == hashlib.sha256(expected_json.encode()).hexdigest()
    assert key == compute_cache_key("s", dict(reversed(inputs.items())), {"p": 1.5}, "v1")
    assert key != compute_cache_key("s", inputs, {"p": 1.5}, "v2")
    assert key != compute_cache_key("t", inputs, {"p": 1.5}, "v1")
    assert compute_cache_key("s", {}, {}) == compute_cache_key("s", {}, {}, "")


@st.composite
def cached_dags(draw):
    """A DAG of `combine` steps reading parents and params, plus a sequence of param settings to run."""
    names, parents = draw(dags(max_nodes=8))
    reads = [sorted(draw(st.sets(st.sampled_from(["p0", "p1", "p2"]), max_size=2))) for _ in names]
    runs = draw(
        st.lists(st.fixed_dictionaries({p: st.integers(0, 3) for p in ("p0", "p1", "p2")}), min_size=2, max_size=4)
    )
    return names, parents, reads, runs


@settings(max_examples=60)
@given(cached_dags())
def test_a_step_hits_the_cache_exactly_when_name_version_inputs_and_read_params_are_equal(case):
    names, parents, reads, runs = case
    steps = [
        Step(
            name,
            combine,
            {**ref_inputs([names[p] for p in parents[i]]), **{f"par_{p}": f"params.{p}" for p in reads[i]}},
        )
        for i, name in enumerate(names)
    ]
    pipeline = Pipeline("p", steps, {"p0": 0, "p1": 0, "p2": 0})
    version = code_fingerprint(combine.__code__)
    seen: set[tuple[str, str, str]] = set()
    for params in runs:
        run = pipeline.run(params)
        values: dict[str, int] = {}
        for i, name in enumerate(names):  # indices are a topological order by construction
            inputs = {
                **{f"in_{names[p]}": values[names[p]] for p in parents[i]},
                **{f"par_{p}": params[p] for p in reads[i]},
            }
            read = {p: params[p] for p in reads[i]}
            values[name] = sum(inputs.values()) % 2
            identity = (name, json.dumps(inputs, sort_keys=True), json.dumps(read, sort_keys=True))
            result = run.steps[name]
            assert result.status is (StepStatus.CACHED if identity in seen else StepStatus.EXECUTED)
            assert result.outputs == {"out": values[name]}
            assert result.cache_key == compute_cache_key(name, inputs, read, version)
            seen.add(identity)
        assert run.executed() == [n for n in pipeline.topological_order() if run.steps[n].status is StepStatus.EXECUTED]


def test_two_producers_emitting_equal_values_hit_the_same_entry():
    cache: dict = {}
    consumer = Step("consumer", combine, {"x": "source.out"})
    first = Pipeline("p", [Step("source", lambda i: {"out": 2}), consumer], cache=cache).run()
    second = Pipeline("p", [Step("source", lambda i: {"out": len("ab")}), consumer], cache=cache).run()
    assert second.steps["source"].status is StepStatus.EXECUTED  # different code
    assert second.steps["consumer"].status is StepStatus.CACHED
    assert second.steps["consumer"].cache_key == first.steps["consumer"].cache_key


def _function_from_source(source: str, name: str = "step"):
    namespace: dict = {}
    exec(compile(textwrap.dedent(source), "<step>", "exec"), namespace)
    return namespace[name]


def test_editing_a_steps_code_misses_the_cache_but_moving_it_does_not():
    original = _function_from_source("def step(inputs):\n    return {'out': inputs['x'] + 1}\n")
    moved = _function_from_source("\n\n\ndef step(inputs):\n    return {'out': inputs['x'] + 1}\n")
    edited = _function_from_source("def step(inputs):\n    return {'out': inputs['x'] + 2}\n")
    nested_edit = _function_from_source(
        "def step(inputs):\n    helper = lambda v: v * 3\n    return {'out': helper(inputs['x'])}\n"
    )
    nested_edited = _function_from_source(
        "def step(inputs):\n    helper = lambda v: v * 4\n    return {'out': helper(inputs['x'])}\n"
    )
    cache: dict = {}

    def status(fn):
        return Pipeline("p", [Step("s", fn, {"x": "params.x"})], {"x": 1}, cache).run().steps["s"].status

    assert status(original) is StepStatus.EXECUTED
    assert status(moved) is StepStatus.CACHED
    assert status(edited) is StepStatus.EXECUTED
    assert status(nested_edit) is StepStatus.EXECUTED
    assert status(nested_edited) is StepStatus.EXECUTED
    assert code_fingerprint(nested_edit.__code__) != code_fingerprint(nested_edited.__code__)
    assert Pipeline("p", [Step("s", edited, {"x": "params.x"}, version="v")], {"x": 1}, cache).run().steps[
        "s"
    ].cache_key == compute_cache_key("s", {"x": 1}, {"x": 1}, "v")


def test_fingerprints_are_stable_across_processes_and_hash_seeds():
    script = (
        "from kinetic_tui.core.platform.pipelines import code_fingerprint\n"
        "def step(inputs):\n"
        "    return {'out': inputs['k'] in {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}}\n"
        "print(code_fingerprint(step.__code__))\n"
    )
    prints = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(prints) == 1


def test_a_separate_cache_mapping_is_shared_by_two_pipeline_objects():
    cache: dict = {}
    steps = [Step("a", combine, {"x": "params.x"}), Step("b", combine, {"y": "a.out"})]
    first = Pipeline("p", steps, {"x": 1}, cache=cache).run()
    second = Pipeline("p", steps, {"x": 1}, cache=cache).run()
    assert first.executed() == ["a", "b"]
    assert second.executed() == []
    assert {r.status for r in second.steps.values()} == {StepStatus.CACHED}
    assert cache[second.steps["b"].cache_key] == {"out": 1}
    assert Pipeline("p", steps, {"x": 1}).run().executed() == ["a", "b"]  # the default cache is per object


def test_condition_steps_are_cached_as_the_branch_taken():
    calls = []

    def predicate(inputs):
        calls.append(inputs)
        return inputs["x"] > 1

    pipeline = Pipeline(
        "p",
        [
            ConditionStep("gate", predicate, {"x": "params.x"}),
            Step("yes", const("y"), when=("gate", True)),
            Step("no", const("n"), when=("gate", False)),
        ],
        {"x": 5},
    )
    first, second = pipeline.run(), pipeline.run()
    assert len(calls) == 1
    assert first.branch_taken == second.branch_taken == {"gate": True}
    assert pipeline.cache[second.steps["gate"].cache_key] == {"branch": True}
    assert second.steps["gate"].status is StepStatus.CACHED
    assert second.steps["yes"].status is StepStatus.CACHED
    assert second.steps["no"].status is StepStatus.SKIPPED
    flipped = pipeline.run({"x": 0})
    assert (flipped.branch_taken, flipped.executed()) == ({"gate": False}, ["gate", "no"])


def test_a_step_cannot_corrupt_its_producers_outputs_by_mutating_inputs():
    def mutate(inputs):
        inputs["xs"].append(99)
        return {"out": len(inputs["xs"])}

    pipeline = Pipeline("p", [Step("src", lambda i: {"out": [1, 2]}), Step("m", mutate, {"xs": "src.out"})])
    run = pipeline.run()
    assert run.steps["src"].outputs == {"out": [1, 2]}
    assert run.steps["m"].outputs == {"out": 3}
    assert pipeline.run().steps["m"].status is StepStatus.CACHED


# --- gates, skips and failures ---------------------------------------------------------------------------


@st.composite
def gated_dags(draw):
    """A DAG whose nodes are plain steps, condition steps (a fixed branch) or failing steps, some gated."""
    names, parents = draw(dags(max_nodes=15))
    kinds = [draw(st.sampled_from(["step", "step", "cond", "fail"])) for _ in names]
    branches = [draw(st.booleans()) for _ in names]
    gates = []
    for i in range(len(names)):
        conditions = [j for j in range(i) if kinds[j] == "cond"]
        gate = draw(st.none() | st.sampled_from(conditions)) if conditions else None
        gates.append(None if gate is None else (gate, draw(st.booleans())))
    return names, parents, kinds, branches, gates


def _fail(inputs):
    raise RuntimeError("boom")


def _branch(value: bool):
    return lambda inputs: value


@given(gated_dags(), st.randoms(use_true_random=False))
def test_random_gated_dags_obey_the_skip_cascade_and_failure_semantics(case, rng):
    names, parents, kinds, branches, gates = case
    steps = []
    for i, name in enumerate(names):
        inputs = {f"in_{names[p]}": f"{names[p]}.{'branch' if kinds[p] == 'cond' else 'out'}" for p in parents[i]}
        when = None if gates[i] is None else (names[gates[i][0]], gates[i][1])
        if kinds[i] == "cond":
            steps.append(ConditionStep(name, _branch(branches[i]), inputs, when=when))
        else:
            steps.append(Step(name, _fail if kinds[i] == "fail" else const(i), inputs, when=when))
    rng.shuffle(steps)
    pipeline = Pipeline("p", steps)

    expected: dict[int, StepStatus] = {}
    for i in range(len(names)):  # indices are a topological order by construction
        producers = list(parents[i]) + ([gates[i][0]] if gates[i] else [])
        failed = any(expected[p] in (StepStatus.FAILED, StepStatus.NOT_RUN) for p in producers)
        blocked = any(expected[p] is StepStatus.SKIPPED for p in producers)
        gated_off = gates[i] is not None and not blocked and branches[gates[i][0]] != gates[i][1]
        if failed:
            expected[i] = StepStatus.NOT_RUN
        elif blocked or gated_off:
            expected[i] = StepStatus.SKIPPED
        else:
            expected[i] = StepStatus.FAILED if kinds[i] == "fail" else StepStatus.EXECUTED

    run = pipeline.run()
    assert {n: r.status for n, r in run.steps.items()} == {names[i]: s for i, s in expected.items()}
    assert list(run.steps) == pipeline.topological_order()
    has_failure = StepStatus.FAILED in expected.values()
    assert run.status is (RunStatus.FAILED if has_failure else RunStatus.SUCCEEDED)
    assert run.branch_taken == {
        names[i]: branches[i] for i, s in expected.items() if kinds[i] == "cond" and s is StepStatus.EXECUTED
    }
    assert run.executed() == [n for n in pipeline.topological_order() if run.steps[n].status is StepStatus.EXECUTED]
    for i, status in expected.items():
        result = run.steps[names[i]]
        if status is StepStatus.FAILED:
            assert result.error == f"step {names[i]!r} raised RuntimeError: boom"
        if status in (StepStatus.SKIPPED, StepStatus.NOT_RUN):
            assert (result.outputs, result.cache_key, result.error) == ({}, None, None)

    rerun = pipeline.run()
    cached_now = {StepStatus.EXECUTED: StepStatus.CACHED}
    assert {n: r.status for n, r in rerun.steps.items()} == {
        names[i]: cached_now.get(s, s) for i, s in expected.items()
    }
    assert rerun.executed() == []


def test_a_failing_step_leaves_its_descendants_not_run_while_others_still_run():
    steps = [
        Step("bad", _fail),
        Step("child", combine, {"x": "bad.out"}),
        Step("grandchild", combine, {"x": "child.out"}),
        Step("other", const(1)),
        Step("after_other", combine, {"x": "other.out"}),
    ]
    run = Pipeline("p", steps).run()
    assert run.status is RunStatus.FAILED
    assert {n: r.status.value for n, r in run.steps.items()} == {
        "bad": "Failed",
        "other": "Executed",
        "after_other": "Executed",
        "child": "NotRun",
        "grandchild": "NotRun",
    }
    assert run.executed() == ["other", "after_other"]


def test_a_failed_step_is_not_cached_and_reruns():
    attempts = []

    def flaky(inputs):
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("first attempt")
        return {"out": 1}

    pipeline = Pipeline("p", [Step("flaky", flaky)])
    assert pipeline.run().steps["flaky"].error == "step 'flaky' raised ValueError: first attempt"
    assert pipeline.run().steps["flaky"].status is StepStatus.EXECUTED
    assert pipeline.run().steps["flaky"].status is StepStatus.CACHED


@pytest.mark.parametrize(
    ("fn", "needle"),
    [
        (lambda i: [1, 2], "step 'bad' must return a dict of output name -> value, got [1, 2]"),
        (lambda i: None, "got None"),
        (lambda i: {1: "x"}, "must return a dict"),
    ],
)
def test_outputs_that_are_not_a_dict_fail_the_step(fn, needle):
    run = Pipeline("p", [Step("bad", fn), Step("child", combine, {"x": "bad.out"})]).run()
    assert run.steps["bad"].status is StepStatus.FAILED
    assert needle in run.steps["bad"].error
    assert run.steps["child"].status is StepStatus.NOT_RUN
    assert run.status is RunStatus.FAILED


def test_a_referenced_output_that_was_not_produced_fails_the_consumer():
    steps = [Step("producer", lambda i: {"other": 1}), Step("consumer", combine, {"x": "producer.missing"})]
    run = Pipeline("p", steps).run()
    assert run.steps["producer"].status is StepStatus.EXECUTED
    assert run.steps["consumer"].status is StepStatus.FAILED
    assert run.steps["consumer"].error == (
        "step 'consumer': input 'x' references 'producer.missing', but step 'producer' produced no output "
        "'missing' (it produced: other)"
    )


def test_inputs_that_are_not_json_fail_the_step_instead_of_caching_unsafely():
    steps = [Step("src", lambda i: {"out": {1, 2}}), Step("use", combine, {"x": "src.out"})]
    run = Pipeline("p", steps).run()
    assert run.steps["use"].status is StepStatus.FAILED
    assert "inputs are not JSON-serialisable" in run.steps["use"].error


# --- persistence -----------------------------------------------------------------------------------------


def test_run_records_round_trip_through_json():
    pipeline = Pipeline(
        "p",
        [
            ConditionStep("gate", lambda i: i["x"] > 0, {"x": "params.x"}),
            Step("yes", lambda i: {"out": [1, "two", None]}, when=("gate", True)),
            Step("no", const(0), when=("gate", False)),
            Step("bad", _fail),
        ],
        {"x": 1},
    )
    run = pipeline.run()
    record = json.loads(json.dumps(run.to_record()))
    assert record["pipeline"] == "p" and record["status"] == "Failed" and record["executed"] == ["gate", "yes"]
    assert record["steps"]["bad"]["error"] == "step 'bad' raised RuntimeError: boom"
    assert record["steps"]["no"] == {
        "status": "Skipped",
        "outputs": {},
        "cache_key": None,
        "duration": 0.0,
        "error": None,
    }
    restored = PipelineRun.from_record(record)
    assert restored == run
    assert restored.executed() == run.executed()
    assert isinstance(restored.steps["yes"], StepResult) and restored.steps["yes"].status is StepStatus.EXECUTED


def test_to_record_rejects_outputs_that_are_not_json_naming_the_step():
    run = Pipeline("p", [Step("blob", lambda i: {"out": object()})]).run()
    with pytest.raises(ValueError, match="outputs of step 'blob' is not JSON-serialisable"):
        run.to_record()


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: r.pop("pipeline"), "field 'pipeline' must be str"),
        (lambda r: r.update(status="Done"), "field 'status' is 'Done'; allowed: Succeeded, Failed"),
        (lambda r: r["steps"]["a"].update(status="Ran"), "step 'a': field 'status' is 'Ran'"),
        (lambda r: r["steps"]["a"].update(duration="1s"), "step 'a': field 'duration' must be int or float"),
        (lambda r: r.update(executed="a"), "field 'executed' must be list"),
    ],
)
def test_from_record_rejects_malformed_records_naming_the_field(mutate, needle):
    record = Pipeline("p", [Step("a", const(1))]).run().to_record()
    mutate(record)
    with pytest.raises(ValueError) as caught:
        PipelineRun.from_record(record)
    assert needle in str(caught.value)
