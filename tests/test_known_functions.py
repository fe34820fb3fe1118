"""What `submit` offers: every MODULE:FUNC submitted in this workspace and the submissions saved by name,
through the Console, the command language, shell completion and the command bar's completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.shell_completion import ShellComplete
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.store.names import object_names
from kinetic_tui.widgets.command_bar import complete_line
from tests.helpers.installed_cli import bash_complete
from tests.test_console_support import state_dump, user_project

pytestmark = pytest.mark.usefixtures("user_project")


@pytest.fixture
async def console():
    service = Console(default_wait=True, offload=False)
    yield service
    await service.aclose()
    launcher.shutdown_server()


def _shell(args: list[str], incomplete: str) -> list[str]:
    complete = ShellComplete(main, {}, "kinetic-tui", "_KINETIC_TUI_COMPLETE")
    return [item.value for item in complete.get_completions(args, incomplete)]


async def test_submitted_and_saved_functions_are_offered_and_a_saved_one_runs_by_name(console):
    assert await console.jobs.known_functions() == ()
    first = await console.jobs.submit("console_user:add", args=[2, 3], kwargs={}, save="five")
    assert first.result == 5
    await console.jobs.submit("console_user:sleepy", args=[0])
    known = await console.jobs.known_functions()
    assert [(f.ref, f.target, f.saved) for f in known] == [
        ("five", "console_user:add", True),
        ("console_user:sleepy", "console_user:sleepy", False),
        ("console_user:add", "console_user:add", False),
    ]
    assert known[0].args == [2, 3] and known[0].kwargs == {}
    again = await console.jobs.submit("five")  # the saved arguments
    assert again.status == "SUCCEEDED" and again.result == 5
    by_keyword = await console.jobs.submit("five", args=[], kwargs={"a": 10, "b": 1})  # kwargs replace them
    assert by_keyword.result == 11 and by_keyword.func == "add"
    assert object_names("function") == ["five", "console_user:add", "console_user:sleepy"]
    assert object_names("function", "console_user:s") == ["console_user:sleepy"]


async def test_bad_saved_names_are_one_line_and_change_nothing(console):
    await console.jobs.submit("console_user:add", args=[1, 1], save="two")
    before = state_dump()
    with pytest.raises(NotFoundError, match=r"^no saved submission 'tow'; saved: two$"):
        await console.jobs.submit("tow")
    with pytest.raises(ValidationError, match="--save 'a:b': a saved name cannot hold ':'"):
        await console.jobs.submit("console_user:add", args=[1, 1], save="a:b")
    assert state_dump() == before


async def test_completion_offers_the_known_functions_in_the_shell_and_the_bar(console):
    await console.jobs.submit("console_user:add", args=[1, 2], save="three")
    assert _shell(["submit"], "") == ["three", "console_user:add"]
    assert _shell(["submit"], "con") == ["console_user:add"]
    names = {"function": [f.ref for f in await console.jobs.known_functions()]}
    assert complete_line("submit th", names) == ["three"]
    assert complete_line("submit ", names) == ["console_user:add", "three"]


def test_the_cli_saves_lists_and_completes_functions():
    runner = CliRunner()
    saved = runner.invoke(main, ["submit", "console_user:add", "--kwargs", '{"a": 1, "b": 2}', "--save", "sum"])
    assert saved.exit_code == 0 and "result: 3" in saved.stdout
    again = json.loads(runner.invoke(main, ["submit", "sum", "--json"]).stdout)
    assert again["ok"] and again["result"]["result"] == 3
    listed = runner.invoke(main, ["functions"]).stdout.splitlines()
    assert listed[0].split()[:3] == ["ref", "target", "saved"]
    assert listed[1].split()[:3] == ["sum", "console_user:add", "True"] and "{a: 1, b: 2}" in listed[1]
    assert listed[2].split()[:3] == ["console_user:add", "console_user:add", "False"]
    assert bash_complete("kinetic-tui submit s", 2) == ["plain,sum"]
    launcher.shutdown_server()
