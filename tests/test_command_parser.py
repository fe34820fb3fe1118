"""The command language parser: typed values, quoting, errors with line/column, completion, help."""

from __future__ import annotations

import json
import pickle
import shlex
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.commands import VERBS, Command, ParseError, complete, help_text, parse_line, parse_script, verbs
from kinetic_tui.core.commands.grammar import WAIT_FLAGS
from kinetic_tui.core.commands.parser import tokenize
from kinetic_tui.core.commands.verbs import FAMILIES
from kinetic_tui.core.errors import KineticError, NotFoundError

EXPECTED_VERBS = [
    "pools",
    "pool add",
    "pool remove",
    "jobs",
    "submit",
    "functions",
    "status",
    "logs",
    "wait",
    "result",
    "cancel",
    "train",
    "interrupt",
    "resume",
    "tune",
    "register",
    "promote",
    "models",
    "endpoint create",
    "endpoint stop",
    "endpoint start",
    "endpoint logs",
    "scale",
    "observe",
    "load",
    "invoke",
    "endpoints",
    "pipeline register",
    "pipeline run",
    "rerun",
    "pipeline resume",
    "pipeline cancel",
    "artifacts prune",
    "pipelines",
    "show",
    "help",
]
STARTING_VERBS = {"submit", "train", "resume", "tune", "pipeline run", "rerun", "pipeline resume", "load"}

# Every verb with every one of its flags, and the exact typed arguments it must produce.
FULL = [
    ("pools", {}, None),
    (
        "pool add gpu-pool --accelerator L4x2 --nodes 3 --spot",
        {"name": "gpu-pool", "accelerator": "l4x2", "nodes": 3, "spot": True},
        None,
    ),
    ("pool remove gpu-pool", {"name": "gpu-pool"}, None),
    ("jobs --status failed --limit 50", {"status": "FAILED", "limit": 50}, None),
    (
        """submit pkg.mod:train_fn --accelerator v5e-2x4 --args '[1, "a"]' --kwargs '{"lr": 0.1}' """
        "--name 'my job' --save trainer --detach",
        {
            "ref": "pkg.mod:train_fn",
            "accelerator": "v5litepod-2x4",
            "args": [1, "a"],
            "kwargs": {"lr": 0.1},
            "name": "my job",
            "save": "trainer",
        },
        False,
    ),
    ("functions", {}, None),
    ("status job-1234abcd", {"job": "job-1234abcd"}, None),
    ("logs job-0000000a --tail 0 --follow", {"job": "job-0000000a", "tail": 0, "follow": True}, None),
    ("wait job-0000000a --timeout 2.5", {"job": "job-0000000a", "timeout": 2.5}, None),
    ("result job-0000000a --timeout 2.5", {"job": "job-0000000a", "timeout": 2.5}, None),
    ("cancel job-0000000a", {"job": "job-0000000a"}, None),
    (
        "train t1 --hp learning_rate=0.2 --hp optimizer=adam --hp layers=[1,2] --epochs 8 --checkpoint-every 2 "
        "--pool tpu --interrupt-before-epoch 5 --step mypkg.steps:train_step --wait",
        {
            "name": "t1",
            "hp": {"learning_rate": 0.2, "optimizer": "adam", "layers": [1, 2]},
            "epochs": 8,
            "checkpoint_every": 2,
            "pool": "tpu",
            "interrupt_before_epoch": 5,
            "step": "mypkg.steps:train_step",
        },
        True,
    ),
    ("interrupt t1", {"training": "t1"}, None),
    ("resume t1 --detach", {"training": "t1"}, False),
    (
        "tune s1 --space learning_rate=0.1,0.2 --space opt=adam,sgd --strategy Bayesian --max-trials 4 --seed 7 "
        "--pool tpu --step mypkg.steps:train_step --wait",
        {
            "name": "s1",
            "space": {"learning_rate": [0.1, 0.2], "opt": ["adam", "sgd"]},
            "strategy": "bayesian",
            "max_trials": 4,
            "seed": 7,
            "pool": "tpu",
            "step": "mypkg.steps:train_step",
        },
        True,
    ),
    (
        "register g1 --from-training t1 --predict pkg.serve:predict",
        {"group": "g1", "from_training": "t1", "predict": "pkg.serve:predict"},
        None,
    ),
    (
        "promote g1 3 STAGING --no-archive-existing",
        {"group": "g1", "version": 3, "stage": "Staging", "no_archive_existing": True},
        None,
    ),
    ("models g1", {"group": "g1"}, None),
    (
        "endpoint create ep1 --model g1 --min 2 --max 8 --target 20 --scale-out-cooldown 0 --scale-in-cooldown 4 "
        "--max-loaded-models 2 --pool p1 --accelerator l4x1 --port 8080 --tick-seconds 0.5",
        {
            "name": "ep1",
            "model": "g1",
            "min": 2,
            "max": 8,
            "target": 20,
            "scale_out_cooldown": 0,
            "scale_in_cooldown": 4,
            "max_loaded_models": 2,
            "pool": "p1",
            "accelerator": "l4x1",
            "port": 8080,
            "tick_seconds": 0.5,
        },
        None,
    ),
    ("endpoint stop ep1", {"endpoint": "ep1"}, None),
    ("endpoint start ep1", {"endpoint": "ep1"}, None),
    ("endpoint logs ep1 --tail 5", {"endpoint": "ep1", "tail": 5}, None),
    ("scale ep1 --min 1 --max 3 --target 5", {"endpoint": "ep1", "min": 1, "max": 3, "target": 5}, None),
    ("observe ep1 45 --tick 0", {"endpoint": "ep1", "concurrency": 45, "tick": 0}, None),
    ("load ep1 --concurrency 30 --ticks 12 --wait", {"endpoint": "ep1", "concurrency": 30, "ticks": 12}, True),
    ("""invoke ep1 g1 '{"x": [1, 2]}'""", {"endpoint": "ep1", "model": "g1", "record": {"x": [1, 2]}}, None),
    ("endpoints", {}, None),
    ("pipeline register demo.pipelines:canonical", {"ref": "demo.pipelines:canonical"}, None),
    (
        "pipeline run canonical --param raw_rows=200 --param threshold=0.9 --detach",
        {"name": "canonical", "param": {"raw_rows": 200, "threshold": 0.9}},
        False,
    ),
    ("""rerun canonical --param 'tags=["a"]' --wait""", {"pipeline": "canonical", "param": {"tags": ["a"]}}, True),
    ("pipeline resume canonical --run 2 --detach", {"name": "canonical", "run": 2}, False),
    ("pipeline cancel canonical --run 3", {"name": "canonical", "run": 3}, None),
    ("artifacts prune", {}, None),
    ("pipelines", {}, None),
    ("show Training t1", {"kind": "training", "name": "t1"}, None),
    ("help pipeline run", {"verb": "pipeline run"}, None),
]

# The shortest valid line of each verb, with every default filled in.
MINIMAL = [
    ("jobs", {"status": None, "limit": None}),
    ("submit m:f", {"ref": "m:f", "accelerator": None, "args": [], "kwargs": {}, "name": None, "save": None}),
    ("submit saved", {"ref": "saved", "accelerator": None, "args": [], "kwargs": {}, "name": None, "save": None}),
    ("logs job-0000000a", {"job": "job-0000000a", "tail": None, "follow": False}),
    ("wait job-0000000a", {"job": "job-0000000a", "timeout": None}),
    (
        "train t",
        {
            "name": "t",
            "hp": {},
            "epochs": 5,
            "checkpoint_every": 1,
            "pool": None,
            "interrupt_before_epoch": None,
            "step": None,
        },
    ),
    (
        "tune s --space lr=0.1 --strategy grid --max-trials 1",
        {
            "name": "s",
            "space": {"lr": [0.1]},
            "strategy": "grid",
            "max_trials": 1,
            "seed": 0,
            "pool": None,
            "step": None,
        },
    ),
    ("promote g 1 None", {"group": "g", "version": 1, "stage": "None", "no_archive_existing": False}),
    ("models", {"group": None}),
    (
        "endpoint create e --model g",
        {
            "name": "e",
            "model": "g",
            "min": 1,
            "max": 5,
            "target": 10,
            "scale_out_cooldown": 3,
            "scale_in_cooldown": 5,
            "max_loaded_models": 3,
            "pool": None,
            "accelerator": None,
            "port": 0,
            "tick_seconds": 1.0,
        },
    ),
    ("scale e", {"endpoint": "e", "min": None, "max": None, "target": None}),
    ("observe e 0", {"endpoint": "e", "concurrency": 0, "tick": None}),
    ("pipeline run p", {"name": "p", "param": {}}),
    ("rerun p", {"pipeline": "p", "param": {}}),
    ("help", {"verb": None}),
]


def _verb_of(line: str) -> str:
    words = line.split()
    return " ".join(words[:2]) if words[0] in FAMILIES else words[0]


def test_verbs_are_exactly_the_spec_verbs():
    assert verbs() == EXPECTED_VERBS
    assert {name for name in VERBS if VERBS[name].starts_work} == STARTING_VERBS


def test_the_full_table_covers_every_verb_and_every_flag():
    assert [_verb_of(line) for line, _, _ in FULL] == EXPECTED_VERBS
    for line, expected, _ in FULL:
        verb = VERBS[_verb_of(line)]
        names = {pos.name for pos in verb.positionals} | {flag.key for flag in verb.flags}
        assert set(expected) == names, line
        assert all(f"{flag.name}" in line for flag in verb.flags), line


@pytest.mark.parametrize("line, expected, wait", FULL, ids=[_verb_of(line) for line, _, _ in FULL])
def test_every_verb_parses_with_all_its_flags(line, expected, wait):
    command = parse_line(line)
    assert command.verb == _verb_of(line)
    assert dict(command.args) == expected
    assert command.wait is wait
    assert command.text == line


@pytest.mark.parametrize("line, expected", MINIMAL, ids=[line for line, _ in MINIMAL])
def test_defaults_are_filled_in(line, expected):
    command = parse_line(line)
    assert dict(command.args) == expected
    assert command.wait is None


def test_mutable_defaults_are_fresh_for_every_command():
    first, second = parse_line("submit m:f"), parse_line("submit m:f")
    first.args["args"].append(1)
    first.args["kwargs"]["x"] = 1
    assert second.args["args"] == [] and second.args["kwargs"] == {}
    assert parse_line("train t").args["hp"] == {}


def test_flags_go_in_any_order_and_both_value_forms_work():
    a = parse_line("pool add p --nodes 2 --accelerator cpu --spot")
    b = parse_line("pool add --spot --accelerator=cpu p --nodes=2")
    assert a == b
    assert dict(a.args) == {"name": "p", "accelerator": "cpu", "nodes": 2, "spot": True}


def test_flag_value_may_contain_equals_and_be_negative_number_text():
    assert parse_line("train t --hp expr=a=b").args["hp"] == {"expr": "a=b"}
    assert parse_line("submit m:f --name=--odd").args["name"] == "--odd"
    assert parse_line("submit m:f --name '--odd'").args["name"] == "--odd"


def test_command_is_frozen_and_its_args_are_read_only():
    command = parse_line("observe ep 3")
    with pytest.raises(AttributeError):
        command.verb = "x"
    with pytest.raises(TypeError):
        command.args["tick"] = 1


def test_equal_commands_are_one_set_member_however_typed():
    """`args` stays out of the hash (a read-only mapping is unhashable), so a command is hashable, and equal
    commands hash equal."""
    assert len({parse_line("status job-0000000a"), parse_line("status   job-0000000a  # again")}) == 1


def test_to_json_is_json_serialisable_and_complete():
    command = parse_line("train t --hp lr=0.5 --wait  # comment")
    data = json.loads(json.dumps(command.to_json()))
    assert data == {
        "verb": "train",
        "wait": True,
        "text": "train t --hp lr=0.5 --wait",
        "args": {
            "name": "t",
            "hp": {"lr": 0.5},
            "epochs": 5,
            "checkpoint_every": 1,
            "pool": None,
            "interrupt_before_epoch": None,
            "step": None,
        },
    }


@pytest.mark.parametrize("line", [line for line, _, _ in FULL])
def test_describe_prints_a_line_that_parses_back_to_the_same_command(line):
    command = parse_line(line)
    assert parse_line(command.describe()) == command


def test_describe_writes_an_empty_string_value_as_json_so_it_parses_back():
    command = parse_line("tune s --space 'opt=\"\",adam' --strategy grid --max-trials 1")
    assert command.args["space"] == {"opt": ["", "adam"]}
    assert parse_line(command.describe()) == command


def test_describe_omits_defaults_and_canonicalises():
    assert parse_line("promote g 2 production").describe() == "promote g 2 Production"
    assert parse_line("train   't 1'  --epochs 5 --hp opt=adam").describe() == "train 't 1' --hp opt=adam"
    assert parse_line("submit m:f --name=--x").describe() == "submit m:f --name '--x'"


# --- quoting and comments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, name",
    [
        ("submit m:f --name 'a b'", "a b"),
        ('submit m:f --name "a b"', "a b"),
        (r'submit m:f --name "say \"hi\""', 'say "hi"'),
        (r"submit m:f --name 'back\slash'", "back\\slash"),
        (r'submit m:f --name "keep \n as is"', "keep \\n as is"),
        (r"submit m:f --name a\ b", "a b"),
        ("submit m:f --name 'it''s'", "its"),
        ("submit m:f --name x'y z'\"w\"", "xy zw"),
        ("submit m:f --name '# not a comment'", "# not a comment"),
        ('submit m:f --name "#also not"', "#also not"),
        ("submit m:f --name a#b", "a#b"),
        (r"submit m:f --name \#c", "#c"),
        ("submit m:f --name ''", None),  # an empty name is refused below
    ],
)
def test_quoting(line, name):
    if name is None:
        with pytest.raises(ParseError, match="non-empty"):
            parse_line(line)
    else:
        assert parse_line(line).args["name"] == name


@pytest.mark.parametrize("line", ["", "   ", "\t", "# just a comment", "   # indented comment", "#"])
def test_blank_and_comment_lines_are_none(line):
    assert parse_line(line) is None


def test_comment_after_a_command_is_dropped_from_text():
    command = parse_line("  status job-0000000a   # why  ")
    assert command.args["job"] == "job-0000000a"
    assert command.text == "status job-0000000a"


@settings(max_examples=300)
@given(st.text(alphabet=" \t\r\n'\"\\ab$`;-=\x0b\x0c\xa0é", max_size=30))
def test_tokenizer_agrees_with_shlex(line):
    try:
        expected = shlex.split(line)
    except ValueError:
        with pytest.raises(ParseError):
            tokenize(line)
    else:
        tokens, end = tokenize(line)
        assert [value for value, _, _ in tokens] == expected
        assert end == len(line)


def test_tokens_carry_their_columns():
    tokens, end = tokenize("""ab  'c d'x "e" # tail""")
    assert tokens == [("ab", 0, 2), ("c dx", 4, 10), ("e", 11, 14)]
    assert end == 15


# --- errors ---------------------------------------------------------------------------------------------


def test_unknown_flag_message_matches_the_documented_form():
    with pytest.raises(ParseError) as info:
        parse_script("pools\n# warm up\ntrain job1 --epoch 5\n")
    assert str(info.value) == (
        "line 3, column 12: unknown flag '--epoch' for 'train'; valid: --checkpoint-every, --epochs, --hp, "
        "--interrupt-before-epoch, --pool, --step, --wait, --detach"
    )
    assert (info.value.line, info.value.column, info.value.token) == (3, 12, "--epoch")
    assert isinstance(info.value, KineticError)


@pytest.mark.parametrize(
    "line, column, token, fragment",
    [
        ("trian t", 1, "trian", "unknown verb 'trian' (did you mean 'train'?); valid: pools, pool add"),
        ("frobnicate", 1, "frobnicate", "unknown verb 'frobnicate'; valid: pools,"),
        ("pool", 5, None, "'pool' needs a subcommand; valid: pool add, pool remove"),
        ("pool ad x", 6, "ad", "unknown subcommand 'ad' for 'pool'; valid: pool add, pool remove"),
        ("status", 7, None, "missing JOB for 'status'; usage: status JOB"),
        ("promote g 1   # no stage", 12, None, "missing STAGE for 'promote'"),
        ("pool add p --nodes 2", 21, None, "missing required flag --accelerator for 'pool add'"),
        ("tune s --strategy grid --max-trials 2", 38, None, "missing required flag --space"),
        ("status job-0000000a b", 21, "b", "unexpected argument 'b' for 'status'; usage: status JOB"),
        ("pools x", 7, "x", "unexpected argument 'x' for 'pools'"),
        ("train t --epochs 3 --epochs=4", 20, "--epochs", "flag --epochs given twice for 'train'"),
        ("train t --wait --detach", 16, "--detach", "flag --detach and --wait/--detach exclude each other"),
        ("train t --wait --wait", 16, "--wait", "flag --wait given twice"),
        ("status job-0000000a --wait", 21, "--wait", "unknown flag '--wait' for 'status'; valid: "),
        ("logs job-0000000a --follow=yes", 28, "yes", "flag --follow takes no value"),
        ("logs job-0000000a --tail", 19, "--tail", "flag --tail needs a value: an integer >= 0"),
        ("logs job-0000000a --tail --follow", 19, "--tail", "flag --tail needs a value"),
        ("logs job-0000000a --tail x7", 26, "x7", "--tail: expected an integer >= 0 and <= 10000000, got 'x7'"),
        ("logs job-0000000a --tail=1.5", 26, "1.5", "--tail: expected an integer >= 0 and <= 10000000, got '1.5'"),
        # the value's own column is not known once quoting split `--tail=`: the flag's column stands for it
        ('logs job-0000000a --tail"=x7"', 19, "x7", "--tail: expected an integer >= 0 and <= 10000000, got 'x7'"),
        ("train t --epochs 0", 18, "0", "--epochs: expected an integer >= 1 and <= 1000000, got '0'"),
        ("observe e -1", 11, "-1", "CONCURRENCY: expected an integer >= 0 and <= 1000000000, got '-1'"),
        ("observe e ٣", 11, "٣", "expected an integer >= 0"),
        ("promote g v1 Staging", 11, "v1", "VERSION: expected an integer >= 1"),
        ("promote g 1 prod", 13, "prod", "STAGE: expected one of None, Staging, Production, Archived, got 'prod'"),
        ("wait job-0000000a --timeout soon", 29, "soon", "--timeout: expected a number of seconds >= 0"),
        ("wait job-0000000a --timeout inf", 29, "inf", "--timeout: expected a number of seconds >= 0"),
        ("submit m:f --args '[1,'", 19, "[1,", "--args: expected a JSON list, got invalid JSON ("),
        ("submit m:f --args '{}'", 19, "{}", "--args: expected a JSON list, got a JSON object"),
        ("submit m:f --kwargs=[1]", 21, "[1]", "--kwargs: expected a JSON object, got a JSON list"),
        ("submit m:f --kwargs null", 21, "null", "--kwargs: expected a JSON object, got a JSON null"),
        ("invoke e m {x}", 12, "{x}", "JSON: expected a JSON value, got invalid JSON"),
        ("invoke e m NaN", 12, "NaN", "expected a JSON value, got invalid JSON (NaN is not JSON)"),
        ("invoke e m " + "[" * 100_000, 12, "[" * 100_000, "nested too deeply"),
        ("submit m: --args []", 8, "m:", "MODULE:FUNC: expected MODULE:NAME such as pkg.module:func, got 'm:'"),
        ("submit ' ' --args []", 8, " ", "MODULE:FUNC: expected a non-empty name"),
        ("submit 1m:f", 8, "1m:f", "expected MODULE:NAME"),
        ("pool add p --accelerator h200 --nodes 1", 26, "h200", "--accelerator: invalid accelerator 'h200'"),
        ("train t --hp lr", 14, "lr", "--hp: expected K=V with K a name such as learning_rate, got 'lr'"),
        ("train t --hp =1", 14, "=1", "--hp: expected K=V"),
        ("train t --hp a=1 --hp a=2", 23, "a=2", "--hp: key 'a' given twice"),
        ("pipeline run p --param x=abc", 24, "x=abc", "--param: expected a JSON value for 'x', got invalid JSON"),
        ("tune s --space lr= --strategy grid --max-trials 1", 16, "lr=", "--space: expected K=V1,V2 with no empty"),
        ("tune s --space lr=1,,2 --strategy grid --max-trials 1", 16, "lr=1,,2", "no empty value"),
        (
            "tune s --space lr=1 --strategy sa --max-trials 1",
            32,
            "sa",
            "--strategy: expected one of grid, random, bayesian, got 'sa'",
        ),
        ("jobs --status done", 15, "done", "expected one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED"),
        ("show thing x", 6, "thing", "KIND: expected one of job, training, study, model, endpoint, pipeline, pool"),
        ("help pool adx", 6, "pool adx", "unknown verb 'pool adx' (did you mean 'pool add'?)"),
        ("status 'j", 8, "'j", "unterminated single quote"),
        ('status "j', 8, '"j', "unterminated double quote"),
        ('status ab"j', 10, 'ab"j', "unterminated double quote"),
        ("status j\\", 9, "j\\", "backslash at the end of the line escapes nothing"),
        ("status ''", 8, "", "JOB: expected job-<8 hex digits>, like job-0123abcd, got ''"),
        ("status job-*", 8, "job-*", "JOB: expected job-<8 hex digits>, like job-0123abcd, got 'job-*'"),
    ],
)
def test_errors_name_the_problem_at_the_right_column(line, column, token, fragment):
    with pytest.raises(ParseError) as info:
        parse_line(line, 4)
    error = info.value
    assert (error.line, error.column, error.token) == (4, column, token)
    assert fragment in error.message
    assert str(error) == f"line 4, column {column}: {error.message}"
    assert "\n" not in str(error)


def test_a_tokenizer_error_on_its_own_is_on_line_1():
    """The command bar tokenizes a line by itself, with no script line to set."""
    with pytest.raises(ParseError) as info:
        tokenize('logs "job')
    assert str(info.value) == "line 1, column 6: unterminated double quote"
    with pytest.raises(ParseError) as info:  # and parses it by itself
        parse_line("status")
    assert str(info.value) == "line 1, column 7: missing JOB for 'status'; usage: status JOB"


def test_parse_error_survives_pickling():
    with pytest.raises(ParseError) as info:
        parse_line("logs job-0000000a --tail x", 5)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.line, copy.column, copy.token, str(copy)) == (5, 26, "x", str(info.value))


def test_huge_tokens_are_echoed_truncated_but_kept_whole_on_the_error():
    with pytest.raises(ParseError) as info:
        parse_line("observe e " + "9x" * 5000)
    assert len(str(info.value)) < 200 and "..." in str(info.value)
    assert info.value.token == "9x" * 5000


def test_line_is_settable_by_the_script_runner():
    with pytest.raises(ParseError) as info:
        parse_line("status")
    info.value.line = 9
    assert str(info.value).startswith("line 9, column 7: ")


# --- scripts ----------------------------------------------------------------------------------------------


def test_parse_script_numbers_lines_and_skips_blanks_and_comments():
    script = "# setup\npool add p --accelerator cpu --nodes 1\n\n  \r\ntrain t --epochs 2  # short\r\nobserve e 4\n"
    parsed = parse_script(script)
    assert [(line, command.verb) for line, command in parsed] == [(2, "pool add"), (5, "train"), (6, "observe")]
    assert parsed[1][1].text == "train t --epochs 2"


def test_parse_script_reports_the_first_bad_line_and_returns_nothing():
    script = "pools\nobserve e 1\nobserve e x\nbogus\n"
    with pytest.raises(ParseError) as info:
        parse_script(script)
    assert (info.value.line, info.value.column) == (3, 11)


def test_parse_script_of_nothing_is_empty():
    assert parse_script("") == []
    assert parse_script("\n# only comments\n\n") == []


# --- fuzzing ----------------------------------------------------------------------------------------------


def _never_raises_anything_but_parse_error(line: str) -> None:
    try:
        command = parse_line(line, 2)
    except ParseError as error:
        assert error.line == 2
        assert 1 <= error.column <= len(line) + 1
        assert "\n" not in str(error)
    else:
        assert command is None or isinstance(command, Command)
        if command is not None:
            assert parse_line(command.describe()) == command


@given(st.text(max_size=60))
def test_arbitrary_text_never_raises_anything_but_parse_error(line):
    _never_raises_anything_but_parse_error(line)


_ALL_FLAGS = sorted({name for verb in VERBS.values() for name in verb.flag_table})
_WORDS = st.one_of(
    st.sampled_from(sorted({word for name in VERBS for word in name.split()})),
    st.sampled_from(_ALL_FLAGS),
    st.sampled_from(_ALL_FLAGS).map(lambda flag: flag + "="),
    st.integers(-3, 12).map(str),
    st.sampled_from(
        [
            "cpu",
            "l4x2",
            "v5e",
            "Production",
            "grid",
            "m:f",
            "[1]",
            "{}",
            '{"a":1}',
            "lr=0.1",
            "lr=1,2",
            "x=",
            "=",
            "#",
            "'",
            '"',
            "\\",
            "job",
            "null",
            "1e9",
            "--",
            "-",
        ]
    ),
    st.text(alphabet=string.printable, max_size=8),
)


@settings(max_examples=400)
@given(st.sampled_from(EXPECTED_VERBS), st.lists(_WORDS, max_size=9), st.lists(st.booleans(), max_size=9))
def test_token_sequences_from_real_verbs_and_flags_never_raise_anything_but_parse_error(verb, words, quote):
    line = (
        verb + " " + " ".join(shlex.quote(word) if q else word for word, q in zip(words, quote + [False] * len(words)))
    )
    _never_raises_anything_but_parse_error(line)


# Valid commands, generated from the grammar: each value is drawn as (text typed, typed value expected).
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,6}", fullmatch=True)
_BARE_WORDS = st.from_regex(r"[A-Za-z][A-Za-z ,]{0,6}", fullmatch=True).filter(
    lambda word: word not in ("true", "false", "null")
)
_IDENT = r"[A-Za-z_][A-Za-z0-9_]{0,5}"


def _typed(values):
    return values.map(lambda value: (json.dumps(value), value))


def _pairs(values, render):
    return st.dictionaries(_KEYS, values, min_size=1, max_size=3).map(
        lambda pairs: [(f"{key}={render(value)}", (key, value)) for key, value in pairs.items()]
    )


_BY_METAVAR = {
    "NAME": st.text(min_size=1, max_size=10).filter(str.strip).map(lambda text: (text, text)),
    "JOB": st.from_regex(r"job-[0-9a-f]{8}", fullmatch=True).map(lambda text: (text, text)),
    "ACC": st.sampled_from(
        [
            ("cpu", "cpu"),
            ("gpu", "l4x1"),
            ("L4x2", "l4x2"),
            ("v5e-2x4", "v5litepod-2x4"),
            ("h100x8:spot", "h100x8:spot"),
        ]
    ),
    "MODULE:NAME": st.from_regex(rf"{_IDENT}(\.{_IDENT}){{0,2}}:{_IDENT}", fullmatch=True).map(lambda t: (t, t)),
    "MODULE:FUNC": st.from_regex(rf"{_IDENT}(\.{_IDENT}){{0,2}}:{_IDENT}", fullmatch=True).map(lambda t: (t, t)),
    "SECONDS": st.floats(0, 1e6).map(lambda seconds: (repr(seconds), seconds)),
    "VERB": st.sampled_from(EXPECTED_VERBS).map(lambda verb: (verb, verb)),
    "K=V": _pairs(_JSON | _BARE_WORDS, lambda v: v if isinstance(v, str) and v[0].isalpha() else json.dumps(v)),
    "K=V1,V2": _pairs(st.lists(_JSON, min_size=1, max_size=3), lambda vs: ",".join(map(json.dumps, vs))),
    "K=JSON": _pairs(_JSON, json.dumps),
}
_BY_EXPECTED = {
    "a JSON value": _typed(_JSON),
    "a JSON list": _typed(st.lists(_JSON, max_size=3)),
    "a JSON object": _typed(st.dictionaries(st.text(max_size=4), _JSON, max_size=3)),
}


def _value(kind):
    if kind.choices:
        return st.sampled_from(kind.choices).flatmap(
            lambda choice: st.sampled_from([(choice, choice), (choice.lower(), choice), (choice.upper(), choice)])
        )
    if kind.expected.startswith("an integer >= "):
        minimum, maximum = kind.bounds
        return st.integers(minimum, maximum).map(lambda number: (str(number), number))
    return _BY_EXPECTED[kind.expected] if kind.expected in _BY_EXPECTED else _BY_METAVAR[kind.metavar]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@st.composite
def valid_commands(draw):
    """A valid line for a random verb (flags shuffled, both value forms) and the args it must produce."""
    verb = VERBS[draw(st.sampled_from(EXPECTED_VERBS))]
    words, expected, flag_chunks = [verb.name], {}, []
    for pos in verb.positionals:
        if pos.required or draw(st.booleans()):
            text, value = draw(_value(pos.type))
            words.append(_quoted(text))
            expected[pos.name] = value
    for flag in verb.flags:
        if not (flag.required or draw(st.booleans())):
            continue
        if flag.type is None:
            flag_chunks.append([flag.name])
            expected[flag.key] = True
            continue
        drawn = draw(_value(flag.type))
        for text, _ in drawn if flag.repeatable else [drawn]:
            equals = draw(st.booleans())
            flag_chunks.append([f"{flag.name}={_quoted(text)}"] if equals else [flag.name, _quoted(text)])
        expected[flag.key] = dict(value for _, value in drawn) if flag.repeatable else drawn[1]
    wait = draw(st.sampled_from([None, True, False])) if verb.starts_work else None
    if wait is not None:
        flag_chunks.append([WAIT_FLAGS[0] if wait else WAIT_FLAGS[1]])
    for chunk in draw(st.permutations(flag_chunks)):
        words.extend(chunk)
    return " ".join(words), verb.name, expected, wait


@settings(max_examples=300)
@given(valid_commands())
def test_generated_valid_commands_parse_to_their_typed_values_and_round_trip(case):
    line, verb, expected, wait = case
    command = parse_line(line)
    assert command.verb == verb and command.wait is wait
    for key, value in expected.items():
        assert command.args[key] == value, key
    assert parse_line(command.describe()) == command


# --- completion -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("po", ["pool", "pools"]),
        ("pool ", ["add", "remove"]),
        ("pool r", ["remove"]),
        ("pipeline ", ["cancel", "register", "resume", "run"]),
        ("tr", ["train"]),
        ("train x --e", ["--epochs"]),
        (
            "train x --",
            [
                "--checkpoint-every",
                "--detach",
                "--epochs",
                "--hp",
                "--interrupt-before-epoch",
                "--pool",
                "--step",
                "--wait",
            ],
        ),
        (
            "train x --epochs 3 --wait --",
            ["--checkpoint-every", "--hp", "--interrupt-before-epoch", "--pool", "--step"],
        ),
        ("train x --hp a=1 --h", ["--hp"]),  # repeatable flags stay offered
        (
            "train x ",
            [
                "--checkpoint-every",
                "--detach",
                "--epochs",
                "--hp",
                "--interrupt-before-epoch",
                "--pool",
                "--step",
                "--wait",
            ],
        ),
        ("promote g 1 ", ["Archived", "None", "Production", "Staging"]),
        ("promote g 1 pro", ["Production"]),
        ("jobs --status ", ["CANCELLED", "FAILED", "PENDING", "RUNNING", "SUCCEEDED"]),
        ("jobs --status r", ["RUNNING"]),
        ("jobs --status=r", ["--status=RUNNING"]),
        ("jobs --tail=", []),
        ("tune s --strategy ", ["bayesian", "grid", "random"]),
        ("show ", ["endpoint", "job", "model", "pipeline", "pool", "study", "training"]),
        ("help pi", ["pipeline", "pipelines"]),
        ("help endpoint ", ["create", "logs", "start", "stop"]),
        ("pool add p ", ["--accelerator", "--nodes", "--spot"]),  # a two-word verb: its flags, not its family
        ("status ", []),  # free-form job id: nothing to offer
        ("status j ", []),
        ("bogus --", []),
        ("status 'open", []),
        ("status j # --", []),
    ],
)
def test_completion(text, expected):
    assert complete(text) == expected


def test_completion_of_nothing_offers_every_first_word():
    first_words = complete("")
    assert set(first_words) == {name.split()[0] for name in EXPECTED_VERBS}
    assert first_words == sorted(first_words)


@given(st.text(max_size=40))
def test_completion_never_raises(text):
    assert isinstance(complete(text), list)


# --- help -------------------------------------------------------------------------------------------------


def test_help_overview_lists_every_verb_with_its_help():
    text = help_text()
    for verb in VERBS.values():
        assert f"  {verb.name} " in text and verb.help in text


@pytest.mark.parametrize("name", EXPECTED_VERBS)
def test_help_for_a_verb_shows_usage_and_every_flag(name):
    verb = VERBS[name]
    text = help_text(name)
    assert text.splitlines()[0] == f"usage: {verb.usage()}"
    for flag in verb.flag_table:
        assert flag in text
    assert ("--wait" in text) == (name in STARTING_VERBS)


def test_usage_matches_the_spec_notation():
    assert VERBS["pool add"].usage() == "pool add NAME --accelerator ACC --nodes N [--spot]"
    assert VERBS["tune"].usage() == (
        "tune NAME --space K=V1,V2 ... --strategy S --max-trials N [--seed N] [--pool NAME] [--step MODULE:NAME] "
        "[--wait | --detach]"
    )
    assert VERBS["help"].usage() == "help [VERB...]"


def test_help_for_a_family_covers_its_verbs_and_unknown_topics_are_refused():
    assert "usage: pool add" in help_text("pool") and "usage: pool remove" in help_text("pool")
    with pytest.raises(NotFoundError, match="unknown verb 'trian' \\(did you mean 'train'\\?\\)"):
        help_text("trian")


def test_help_command_names_a_real_verb():
    assert parse_line("help").args["verb"] is None
    assert parse_line("help pool").args["verb"] == "pool"
    assert help_text(parse_line("help endpoint create").args["verb"]).startswith("usage: endpoint create NAME")
    assert all(flag not in WAIT_FLAGS for flag in VERBS["help"].flag_table)
