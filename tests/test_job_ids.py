"""Job and batch ids are held to their shape at every entry point, before any file is touched: a glob, a
path or None is a one-line error naming the bad id, never a lookup that reaches another job."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import kinetic_tui as kinetic
from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.validation import require_group_id, require_job_id
from kinetic_tui.script import run_script

BAD_JOB_IDS = ["*", "job-[0-9a-f]*", "../../../../x", "job-0123abc", "job-0123ABCD", "job-0123abcd/..", "", " "]


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    yield invoke
    launcher.shutdown_server()


@pytest.fixture
def finished_job(cli, tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "ids_job.py").write_text("def double(n):\n    return n * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    submitted = cli("submit", "ids_job:double", "--args", "[4]", "--wait", "--json")
    assert submitted.exit_code == 0, submitted.output
    return json.loads(submitted.output)["result"]["job_id"]


def _files(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if "state.db" not in path.name)


@pytest.mark.parametrize("bad", [*BAD_JOB_IDS, None, 7])
def test_require_job_id_refuses_anything_but_the_shape_on_one_line(bad) -> None:
    with pytest.raises(ValidationError, match=r"^job id: expected job-<8 hex digits>, like job-0123abcd, got ") as info:
        require_job_id(bad)
    assert "\n" not in str(info.value) and repr(bad) in str(info.value)


def test_good_ids_come_back() -> None:
    assert require_job_id("job-0123abcd") == "job-0123abcd"
    assert require_group_id("grp-0123abcd") == "grp-0123abcd"
    assert require_group_id("group-0123abcd") == "group-0123abcd"  # a batch made before ids were Kinetic's
    for bad in ("grp-*", "group-*", "grp-0123abcd0", "grp-0123ABCD"):
        with pytest.raises(ValidationError, match="batch id: expected grp-<8 hex digits>"):
            require_group_id(bad)


@pytest.mark.parametrize("bad", ["*", "job-[0-9a-f]*", "../../../../x", None])
def test_attach_refuses_a_malformed_id_even_with_jobs_present(finished_job, bad) -> None:
    with pytest.raises(ValidationError, match="job id: expected job-<8 hex digits>") as info:
        kinetic.attach(bad)
    assert "\n" not in str(info.value) and "NoneType" not in str(info.value)


def test_attach_does_not_read_a_handle_json_outside_the_home(kinetic_home, tmp_path) -> None:
    outside = tmp_path / "x"
    outside.mkdir()
    (outside / "handle.json").write_text("{}")
    with pytest.raises(ValidationError, match="job id"):
        kinetic.attach(str(Path("..") / ".." / ".." / ".." / ".." / outside))


@pytest.mark.parametrize("bad", ["*", "grp-*", "group-*", "../x", None])
def test_attach_batch_refuses_a_malformed_group_id(bad) -> None:
    with pytest.raises(ValidationError, match="batch id: expected grp-<8 hex digits>"):
        kinetic.attach_batch(bad)


def test_a_handle_record_with_a_malformed_job_id_is_refused(finished_job) -> None:
    record = {**kinetic.attach(finished_job).to_record(), "job_id": "../../x"}
    with pytest.raises(ValidationError, match="job_id: expected job-<8 hex digits>"):
        JobHandle.from_record(record)


@pytest.mark.parametrize("bad", ["*", "job-[0-9a-f]*", "../../../../x"])
def test_cli_cleanup_of_a_glob_exits_2_with_one_line_and_deletes_nothing(cli, finished_job, kinetic_home, bad) -> None:
    before = _files(kinetic_home)
    result = cli("jobs", "cleanup", bad)
    assert result.exit_code == 2, result.output
    assert (
        result.output.count("\n") == 1 and "job-<8 hex digits>" in result.output and "cleaned up" not in result.output
    )
    assert _files(kinetic_home) == before


@pytest.mark.parametrize("verb", ["status", "logs", "result", "cancel"])
def test_cli_job_verbs_refuse_a_glob_with_exit_2(cli, finished_job, verb) -> None:
    result = cli("jobs", verb, "*")
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "JOB: expected job-<8 hex digits>" in result.output
    assert cli("jobs", "status", finished_job).exit_code == 0


def test_script_job_verbs_refuse_a_malformed_id_before_anything_runs() -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run_script("pools\nwait job-*\n", stdout=out, stderr=err) == 2
    assert out.getvalue() == "" and err.getvalue().count("\n") == 1 and "line 2" in err.getvalue()


def test_console_refuses_a_malformed_id_on_every_job_call() -> None:
    async def calls() -> list[str]:
        console = Console(default_wait=True, offload=False)
        errors = []
        try:
            for call in (
                console.jobs.get,
                console.jobs.wait,
                console.jobs.logs,
                console.jobs.result,
                console.jobs.cancel,
            ):
                with pytest.raises(ValidationError) as info:
                    await call("../x")
                errors.append(str(info.value))
            with pytest.raises(ValidationError):
                next(console.jobs.read_logs("*"))
        finally:
            await console.aclose()
        return errors

    assert all(error.startswith("job id: expected job-<8 hex digits>") for error in asyncio.run(calls()))
