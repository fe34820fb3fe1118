"""The click CLI: workspace commands, profiles, pools and jobs, verbs passed through, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.profiles import current_profile_name, list_profiles


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(main, list(args), input=input, catch_exceptions=False)

    yield invoke
    launcher.shutdown_server()


def test_init_creates_the_workspace_and_the_local_profile(cli, kinetic_home):
    result = cli("init")
    assert result.exit_code == 0, result.output
    assert (kinetic_home / "profiles.json").exists() and (kinetic_home / "state.db").exists()
    assert current_profile_name() == "local"


def test_config_show_names_the_source_of_every_value(cli, monkeypatch):
    monkeypatch.setenv("KINETIC_ZONE", "europe-west4-a")
    rows = {r["field"]: r for r in json.loads(cli("config", "show", "--json").output)}
    assert rows["zone"] == {"field": "zone", "value": "europe-west4-a", "source": "env KINETIC_ZONE"}
    assert rows["cluster"]["source"] == "default" and rows["backend"]["source"] == "profile local"


def test_the_profile_flag_outranks_the_environment_without_writing_it(cli, monkeypatch):
    cli("profile", "create", "staging", "--backend", "gke", "--project", "acme")
    monkeypatch.setenv("KINETIC_PROFILE", "local")
    rows = {r["field"]: r for r in json.loads(cli("--profile", "staging", "config", "show", "--json").output)}
    assert rows["project"] == {"field": "project", "value": "acme", "source": "profile staging"}
    assert os.environ["KINETIC_PROFILE"] == "local"
    # the choice lasts one invocation: the next one without the flag follows the environment again
    rows = {r["field"]: r for r in json.loads(cli("config", "show", "--json").output)}
    assert rows["backend"]["source"] == "profile local"
    bad = cli("--profile", "no such", "config", "show")
    assert bad.exit_code != 0 and "--profile 'no such'" in bad.output


def test_profile_lifecycle_and_bad_names(cli):
    assert cli("profile", "create", "staging", "--backend", "gke", "--project", "acme").exit_code == 0
    assert cli("profile", "use", "staging").exit_code == 0
    assert current_profile_name() == "staging"
    rows = json.loads(cli("profile", "ls", "--json").output)
    assert [r["name"] for r in rows] == ["local", "staging"] and rows[1]["current"] is True
    refused = cli("profile", "rm", "staging")
    assert refused.exit_code == 1 and "profile use" in refused.output  # the current one stays
    bad = cli("profile", "create", "-bad name")
    assert bad.exit_code != 0
    assert [p.name for p in list_profiles()] == ["local", "staging"]


def test_a_gke_profile_refuses_local_cluster_commands_with_one_line(cli):
    cli("profile", "create", "prod", "--backend", "gke", "--project", "acme", "--use")
    result = cli("up")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "profile use local" in result.output


def test_pool_add_list_remove_through_the_command_language(cli):
    added = cli("pool", "add", "tpus", "--accelerator", "v5e-2x2", "--nodes", "2", "--json")
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["result"]["emulated"] is True
    pools = json.loads(cli("pool", "list", "--json").output)["result"]
    assert {p["name"] for p in pools} == {"cpu", "tpus"}
    assert cli("pool", "remove", "tpus", "--yes").exit_code == 0
    assert [p.name for p in local_backend().pools()] == ["cpu"]


def test_bad_input_is_one_line_and_changes_nothing(cli):
    before = local_backend().pools()
    result = cli("pool", "add", "x", "--accelerator", "a100x3", "--nodes", "1")
    assert result.exit_code == 2  # the accelerator is checked when the line parses
    assert "1, 2, 4, 8, 16" in result.output and "Traceback" not in result.output
    assert local_backend().pools() == before
    assert cli("promote", "nope", "1", "Production").exit_code == 1


def test_every_verb_is_a_cli_command(cli):
    from kinetic_tui.core.commands.verbs import VERBS

    listed = "".join(cli(*group, "--help").output for group in ((), ("pool",), ("pipeline",), ("endpoint",)))
    for verb in VERBS:
        assert verb.split()[-1] in listed, verb
    cli("pipeline", "register", "kinetic_tui.core.demo.canonical:canonical_pipeline")
    run = json.loads(cli("pipeline", "run", "canonical", "--json").output)
    assert run["ok"] and run["result"]["status"] == "Succeeded"


def test_jobs_list_status_logs_result_and_cleanup(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "cli_job.py").write_text("def hello(n):\n    print('hello', n)\n    return n * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    submitted = json.loads(cli("submit", "cli_job:hello", "--args", "[21]", "--wait", "--json").output)
    job = submitted["result"]["job_id"]
    assert json.loads(cli("jobs", "status", job, "--json").output)["result"]["status"] == "SUCCEEDED"
    assert "hello 21" in cli("jobs", "logs", job).output
    assert json.loads(cli("jobs", "result", job, "--json").output)["result"]["value"] == 42
    listed = json.loads(cli("jobs", "list", "--json").output)["result"]
    assert [j["job_id"] for j in listed] == [job]
    assert cli("jobs", "cleanup", job).exit_code == 0
    assert cli("jobs", "status", "job-0000dead", "--json").exit_code == 1  # well-formed, unknown


def test_script_flag_exit_codes(cli, tmp_path):
    good, bad_parse, failing = tmp_path / "good.kn", tmp_path / "bad.kn", tmp_path / "failing.kn"
    good.write_text("pools\n")
    bad_parse.write_text("pools\npool add x --nodes two\n")
    failing.write_text(
        "pool add a --accelerator cpu --nodes 1\npromote nope 1 Staging\npool add b --accelerator cpu --nodes 1\n"
    )
    assert cli("--script", str(good)).exit_code == 0
    assert cli("--script", str(bad_parse)).exit_code == 2
    assert cli("--script", str(failing)).exit_code == 1
    assert {p.name for p in local_backend().pools()} == {"cpu", "a"}  # stopped at the failure, kept line 1
    missing = cli("--script", str(tmp_path / "nope.kn"))
    assert missing.exit_code == 2 and "cannot read it" in missing.output


def test_the_installed_entry_point_runs_a_script_from_stdin(kinetic_home):
    exe = shutil.which("kinetic-tui", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert exe, "the kinetic-tui console script is not installed"
    done = subprocess.run(
        [exe, "--script", "-", "--output", "json"],
        input="pools\nhelp observe\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["command"] for r in records] == ["pools", "help observe"]
    assert records[0]["result"][0]["name"] == "cpu"
