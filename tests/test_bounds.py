"""Every number a user gives has documented bounds: the parser, the CLI and the Python API refuse a value
outside them with one line naming the flag or field and the bounds, and change nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.pools import checked_config
from kinetic_tui.core.commands import VERBS, ParseError, help_text, parse_line
from kinetic_tui.core.console import Console
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.autoscaling import Endpoint, ScalingConfig
from kinetic_tui.core.platform.registry import ModelVersion, Stage
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.platform.training import TrainingJob
from kinetic_tui.core.platform.tuning import HyperparameterTuner
from kinetic_tui.core.validation import (
    MAX_CONCURRENCY,
    MAX_EPOCHS,
    MAX_INSTANCES,
    MAX_LOAD_TICKS,
    MAX_LOADED_MODELS,
    MAX_NODES,
    MAX_SEED,
    MAX_TAIL_LINES,
    MAX_TICK,
    MAX_TRIALS,
    MAX_VERSION,
)
from tests.test_console_support import state_dump

# (verb, the argument's label in messages, a line with {} where the value goes); one per numeric argument
NUMERIC_ARGUMENTS = [
    ("pool add", "--nodes", "pool add big --accelerator cpu --nodes {}"),
    ("jobs", "--limit", "jobs --limit {}"),
    ("logs", "--tail", "logs job-0000000a --tail {}"),
    ("wait", "--timeout", "wait job-0000000a --timeout {}"),
    ("result", "--timeout", "result job-0000000a --timeout {}"),
    ("train", "--epochs", "train t --epochs {} --detach"),
    ("train", "--checkpoint-every", "train t --checkpoint-every {}"),
    ("train", "--interrupt-before-epoch", "train t --interrupt-before-epoch {}"),
    ("tune", "--max-trials", "tune s --space lr=1 --strategy grid --max-trials {}"),
    ("tune", "--seed", "tune s --space lr=1 --strategy random --max-trials 1 --seed {}"),
    ("promote", "VERSION", "promote g {} Staging"),
    ("endpoint create", "--min", "endpoint create e --model g --min {}"),
    ("endpoint create", "--max", "endpoint create e --model g --max {}"),
    ("endpoint create", "--target", "endpoint create e --model g --target {}"),
    ("endpoint create", "--scale-out-cooldown", "endpoint create e --model g --scale-out-cooldown {}"),
    ("endpoint create", "--scale-in-cooldown", "endpoint create e --model g --scale-in-cooldown {}"),
    ("endpoint create", "--max-loaded-models", "endpoint create e --model g --max-loaded-models {}"),
    ("endpoint create", "--port", "endpoint create e --model g --port {}"),
    ("endpoint create", "--tick-seconds", "endpoint create e --model g --tick-seconds {}"),
    ("endpoint logs", "--tail", "endpoint logs e --tail {}"),
    ("scale", "--min", "scale e --min {}"),
    ("scale", "--max", "scale e --max {}"),
    ("scale", "--target", "scale e --target {}"),
    ("observe", "CONCURRENCY", "observe e {}"),
    ("observe", "--tick", "observe e 1 --tick {}"),
    ("load", "--concurrency", "load e --concurrency {} --ticks 1"),
    ("load", "--ticks", "load e --concurrency 1 --ticks {}"),
    ("pipeline resume", "--run", "pipeline resume p --run {}"),
    ("pipeline cancel", "--run", "pipeline cancel p --run {}"),
]
HUGE = "99999999999999999999999"


def _kind(verb: str, label: str) -> Any:
    table = VERBS[verb]
    if label in table.flag_table:
        kind = table.flag_table[label].type
    else:
        kind = next(pos.type for pos in table.positionals if pos.metavar == label)
    assert kind is not None and kind.bounds is not None, (verb, label)
    return kind


def _shown(bound: float) -> str:
    return f"{bound:.0f}" if isinstance(bound, float) else str(bound)


def _out_of_range(verb: str, label: str) -> list[str]:
    """Just past the top, far past it, and the 23-digit value that once overflowed SQLite."""
    top = _kind(verb, label).bounds[1]
    just_past = _shown(top + 1)
    return [just_past, HUGE, "1e999"] if isinstance(top, float) else [just_past, HUGE]


CASES = [
    pytest.param(line.format(value), verb, label, id=f"{verb} {label} {value[:12]}")
    for verb, label, line in NUMERIC_ARGUMENTS
    for value in _out_of_range(verb, label)
]


def test_every_numeric_argument_has_bounds_and_a_case_here():
    declared = {
        (verb.name, argument)
        for verb in VERBS.values()
        for argument, kind in [(f.name, f.type) for f in verb.flags] + [(p.metavar, p.type) for p in verb.positionals]
        if kind is not None and kind.bounds is not None
    }
    numeric = {
        (verb.name, flag.name)
        for verb in VERBS.values()
        for flag in verb.flags
        if flag.type is not None and flag.type.metavar in ("N", "K", "E", "T", "SECONDS")
    }
    assert numeric <= declared
    assert declared == {(verb, label) for verb, label, _ in NUMERIC_ARGUMENTS}


@pytest.mark.parametrize("line, verb, label", CASES)
def test_the_parser_names_the_argument_and_its_bounds(line, verb, label):
    with pytest.raises(ParseError) as info:
        parse_line(line)
    low, high = _kind(verb, label).bounds
    assert info.value.message.startswith(f"{label}: expected ")
    assert f">= {_shown(low)} and <= {_shown(high)}, got " in info.value.message
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("line, verb, label", CASES)
def test_the_cli_exits_2_with_one_line_and_changes_nothing(line, verb, label):
    runner = CliRunner()
    assert runner.invoke(main, ["pools"], catch_exceptions=False).exit_code == 0  # the workspace exists
    before = state_dump()
    try:
        argv = line.split()
        if argv[0] == "jobs":  # the CLI's `jobs` is a group: the verb's listing is `jobs list`
            argv.insert(1, "list")
        result = runner.invoke(main, argv, catch_exceptions=False)
    finally:
        launcher.shutdown_server()
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and label in lines[0] and "<=" in lines[0], result.output
    assert "Traceback" not in result.output
    assert state_dump() == before


@pytest.mark.parametrize(
    "line, label",
    [
        ("submit m:f --args '[1e999]'", "--args"),
        ("submit m:f --kwargs '{\"x\": -1e999}'", "--kwargs"),
        ("invoke e m '{\"x\": [1, 1e400]}'", "JSON"),
        ("pipeline run p --param x=1e999", "--param"),
    ],
)
def test_json_numbers_out_of_float_range_are_refused_as_nan_is(line, label):
    with pytest.raises(ParseError) as info:
        parse_line(line)
    assert info.value.message.startswith(f"{label}: expected a JSON ")
    assert "out of range for a number" in info.value.message and "\n" not in str(info.value)


def test_json_numbers_in_range_still_parse():
    assert parse_line("submit m:f --args '[1e308, -2.5e-300, 12345678901234567890]'").args["args"] == [
        1e308,
        -2.5e-300,
        12345678901234567890,
    ]


def test_bounds_show_in_help():
    assert f"an integer >= 1 and <= {MAX_EPOCHS}; default 5" in help_text("train")
    assert f"an integer >= 1 and <= {MAX_NODES}" in help_text("pool add")


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda: checked_config("big", "cpu", MAX_NODES + 1, False),
            f"--nodes must be an integer >= 1 and <= {MAX_NODES}",
        ),
        (lambda: TrainingJob("t", {}, MAX_EPOCHS + 1, 1), f"max_epochs must be an integer >= 1 and <= {MAX_EPOCHS}"),
        (lambda: TrainingJob("t", {}, 5, MAX_EPOCHS + 1), "checkpoint_every must be an integer >= 1 and <= "),
        (
            lambda: HyperparameterTuner({"lr": [1]}, max_trials=MAX_TRIALS + 1),
            f"max_trials must be an integer >= 1 and <= {MAX_TRIALS}",
        ),
        (lambda: HyperparameterTuner({"lr": [1]}, seed=MAX_SEED + 1), f"seed: must be >= 0 and <= {MAX_SEED}"),
        (lambda: HyperparameterTuner({"lr": [1]}, seed=-1), "seed: must be >= 0"),
        (lambda: HyperparameterTuner({"lr": [1]}, max_epochs=10**23), "max_epochs must be an integer >= 1 and <= "),
        (lambda: ScalingConfig(max_instances=MAX_INSTANCES + 1), f"max_instances: must be >= 1 and <= {MAX_INSTANCES}"),
        (lambda: ScalingConfig(target_per_instance=1e300), f"target_per_instance: must be <= {MAX_CONCURRENCY}"),
        (lambda: ScalingConfig(scale_in_cooldown=MAX_TICK * 2), f"scale_in_cooldown: must be <= {MAX_TICK}"),
        (lambda: Endpoint("e").observe(10**23, 0), f"concurrency: must be <= {MAX_CONCURRENCY}"),
        (lambda: Endpoint("e").observe(1, 10**23), f"now_tick: must be <= {MAX_TICK}"),
        (
            lambda: MultiModelEndpoint(MAX_LOADED_MODELS + 1),
            f"max_loaded_models: must be >= 1 and <= {MAX_LOADED_MODELS}",
        ),
        (lambda: ModelVersion("g", MAX_VERSION + 1, "h", {}, None, Stage.NONE), "version: must be >= 1 and <= "),
    ],
)
def test_the_python_api_holds_the_same_bounds(build, message):
    with pytest.raises(ValidationError) as info:
        build()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_console_calls_hold_the_bounds_and_change_nothing():
    async def scenario() -> None:
        console = Console()
        await console.pools.list()
        before = state_dump()
        calls = [
            (console.pools.add("big", "cpu", 10**23), "--nodes"),
            (console.training.start("t", {}, 10**23, 1, None, None, False), "max_epochs"),
            (console.training.tune("s", {"lr": [1]}, "random", 1, 2**64), "seed"),
            (console.jobs.logs("job-0000000a", MAX_TAIL_LINES + 1), "tail"),
            (console.endpoints.load("e", 1, MAX_LOAD_TICKS + 1), "ticks"),
        ]
        for call, field in calls:
            with pytest.raises(ValidationError, match=field):
                await call
        assert state_dump() == before

    asyncio.run(scenario())
