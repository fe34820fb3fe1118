"""The click commands generated from the verb table: real options in --help, the same result and exit code
as the line in a script, shell completion of verbs, flags, choices and workspace names, --version."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

import kinetic_tui
from kinetic_tui.cli.main import main
from kinetic_tui.cli.verbs import VerbCommand, split_json_flag
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.commands.verbs import VERBS
from kinetic_tui.script import run_script
from tests.helpers.installed_cli import bash_complete


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    yield invoke
    launcher.shutdown_server()


def completions(args: list[str], incomplete: str) -> list[str]:
    return [
        item.value
        for item in ShellComplete(main, {}, "kinetic-tui", "_KINETIC_TUI_COMPLETE").get_completions(args, incomplete)
    ]


def test_version_prints_the_package_version(cli):
    result = cli("--version")
    assert result.exit_code == 0 and result.output == f"kinetic-tui {kinetic_tui.__version__}\n"


def test_every_verb_is_a_generated_command_unless_a_workspace_command_owns_it(cli):
    for name, verb in VERBS.items():
        *family, word = name.split()
        group = main.commands[family[0]] if family else main
        command = group.commands[word]
        if name not in ("status", "jobs", "help", "pool add", "pool remove"):
            assert isinstance(command, VerbCommand) and command.verb is verb, name
    assert main.commands["jobs"].commands["list"].verb is VERBS["jobs"]


def test_train_help_lists_every_flag_with_its_value_and_help(cli):
    text = cli("train", "--help").output
    for flag in VERBS["train"].flag_table.values():
        assert flag.name in text and flag.help.split()[0] in text, flag.name
    assert "--epochs N" in text and "an integer >= 1 and <= 1000000; default 5" in " ".join(text.split())
    assert "--step MODULE:NAME" in text and "NAME" in text and "training job name" in text


def _script(line: str, output: str) -> tuple[int, str, str]:
    """The line run as the CLI runs it: a command's errors name no script line."""
    out, err = io.StringIO(), io.StringIO()
    code = run_script(line, output=output, stdout=out, stderr=err, numbered=False)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["promote", "fraud", "1", "Production"],
        ["promote", "fraud", "1", "Production", "--json"],
        ["train", "t", "--epoch", "5"],  # unknown flag: the parser's one line, exit 2
        ["observe", "e", "-1"],  # click would call -1 an option; the parser calls it a bad CONCURRENCY
        ["register", "g"],  # a missing required flag
    ],
)
def test_a_verb_command_does_exactly_what_its_line_does_in_a_script(cli, args):
    words, as_json = split_json_flag(args)
    code, out, err = _script(" ".join(words), "json" if as_json else "text")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code and code in (1, 2)
    assert result.stdout == out and result.stderr == err
    assert err.count("\n") <= 1 and not err.startswith("line ")


def test_split_json_flag_reads_json_as_click_does():
    assert split_json_flag(["a", "--json", "--x"]) == (["a", "--x"], True)
    assert split_json_flag(["a", "--", "--json"]) == (["a", "--json"], False)
    assert split_json_flag(["a"]) == (["a"], False)


def test_completion_offers_verbs_flags_and_choices():
    assert {"train", "tune", "pools", "promote"} <= set(completions([], "")) and completions([], "tr") == ["train"]
    assert completions(["train", "t"], "--s") == ["--step"]
    assert completions(["jobs", "list", "--status"], "RU") == ["RUNNING"]
    assert completions(["promote", "g", "1"], "pro") == ["Production"]
    assert completions(["help", "pool"], "") == ["add", "remove"]


def test_completion_offers_names_from_the_workspace(cli, tmp_path, monkeypatch):
    assert cli("pool", "add", "gpus", "--accelerator", "l4", "--nodes", "1").exit_code == 0
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "completion_job.py").write_text("def hello():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    job = json.loads(cli("submit", "completion_job:hello", "--wait", "--json").output)["result"]["job_id"]
    assert completions(["pool", "remove"], "g") == ["gpus"]
    assert completions(["train", "x", "--pool"], "") == ["cpu", "gpus"]
    assert completions(["cancel"], "job-") == [job]
    assert completions(["jobs", "logs"], job[:6]) == [job]
    assert completions(["status"], "") == [job]
    assert completions(["show", "pool"], "c") == ["cpu"]
    assert completions(["show", "job"], "") == [job]
    assert completions(["profile", "use"], "lo") == ["local"]


def test_completion_without_a_workspace_offers_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("KINETIC_HOME", str(tmp_path / "never-made"))
    assert completions(["pool", "remove"], "") == []
    assert not (tmp_path / "never-made" / "state.db").exists()


def test_bash_completion_through_the_installed_entry_point(cli):
    assert cli("pool", "add", "gpus", "--accelerator", "l4", "--nodes", "1").exit_code == 0
    assert bash_complete("kinetic-tui pool remove g", 3) == ["plain,gpus"]
    assert bash_complete("kinetic-tui train x --ch", 3) == ["plain,--checkpoint-every"]
