"""The CLI's answers about jobs: a failed job's remote traceback and phase, errors without script line
numbers, and `jobs list` fitted to the terminal with what each job came to."""

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
from tests.helpers.installed_cli import executable

PROJECT = """\
def boom(x, scale=1):
    y = x * scale
    raise ValueError(f"bad {y}")


def fine(x, scale=1):
    return {"loss": x * 0.1 * scale, "tags": ["a", "b"]}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "results_job.py").write_text(PROJECT)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    launcher.shutdown_server()


def _cli(*args: str, columns: int = 80):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": str(columns)})


def _submit(func: str, *args: str) -> str:
    done = _cli("submit", f"results_job:{func}", *args, "--wait", "--json")
    return json.loads(done.output)["result"]["job_id"]


def test_result_of_a_failed_job_prints_the_remote_traceback_and_phase(project):
    job = _submit("boom", "--args", "[3]", "--kwargs", '{"scale": 2}')
    for command in (("result", job), ("jobs", "result", job, "--no-cleanup")):
        done = _cli(*command)
        assert done.exit_code == 1
        lines = done.stderr.splitlines()
        assert lines[0] == f"error: job {job} failed in phase 'execute': ValueError: bad 6"
        assert '  File "results_job.py", line 3, in boom' in lines
        assert lines[-1] == "ValueError: bad 6" and done.stdout == ""
        assert not any(line.startswith("line ") for line in lines)
    debug = _cli("--debug", "result", job)
    assert debug.exit_code == 1
    tail = debug.stderr.splitlines()
    assert 'console/jobs.py", line' in debug.stderr  # the CLI's own stack, with --debug only
    assert tail[-3:] == [
        '  File "results_job.py", line 3, in boom',
        '    raise ValueError(f"bad {y}")',
        "ValueError: bad 6",
    ]
    as_json = json.loads(_cli("result", job, "--json").stdout)
    assert as_json["error"]["phase"] == "execute" and "line 3, in boom" in as_json["error"]["traceback"]


def test_cli_errors_name_no_script_line(project):
    bad = _cli("promote", "fraud", "1", "Bogus")
    assert bad.exit_code == 2
    assert bad.stderr == "error: STAGE: expected one of None, Staging, Production, Archived, got 'Bogus'\n"
    missing = _cli("cancel", "job-0000dead")
    assert missing.exit_code == 1 and missing.stderr.startswith("error: ") and "line" not in missing.stderr


def test_jobs_list_fits_the_terminal_and_shows_what_each_job_came_to(project):
    failed, fine = _submit("boom", "--args", "[1]"), _submit("fine", "--args", "[3]", "--kwargs", '{"scale": 2}')
    narrow = _cli("jobs", "list").stdout.splitlines()
    assert len(narrow) == 3 and all(len(line) <= 80 for line in narrow)
    header = narrow[0].split()
    assert header[:4] == ["job_id", "name", "status", "result"] and "created_at" not in header
    assert narrow[1].startswith(fine) and "{loss: 0.6, tags: [a, b]}" in narrow[1]  # not 0.6000000000000001
    assert narrow[2].startswith(failed) and "ValueError: bad 1" in narrow[2]
    tiny = _cli("jobs", "list", columns=40).stdout.splitlines()
    assert tiny[0].split() == ["job_id", "status", "result"] and all(len(line) <= 40 for line in tiny)
    wide = _cli("jobs", "list", "--wide", columns=40).stdout.splitlines()
    assert wide[0].split()[-3:] == ["phase", "func", "created_at"] and "execute" in wide[2]
    records = json.loads(_cli("jobs", "list", "--wide", "--json").stdout)["result"]
    assert [r["job_id"] for r in records] == [fine, failed] and records[0]["result"] is None  # --json unchanged
    assert _cli("jobs", "list", "--status", "FAILED").stdout.count("job-") == 1
    refused = _cli("jobs", "list", "--status", "NOPE")
    assert refused.exit_code == 2 and refused.stderr.startswith("error: --status: expected one of PENDING")


def test_the_installed_executable_prints_the_remote_traceback(project):
    job = _submit("boom", "--args", "[2]")
    exe = executable()
    done = subprocess.run([exe, "result", job], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: job {job} failed in phase 'execute'")
    assert '  File "results_job.py", line 3, in boom\n' in done.stderr
    listed = subprocess.run(
        [exe, "jobs", "list"], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"}
    )
    assert listed.returncode == 0 and "ValueError: bad 2" in listed.stdout
