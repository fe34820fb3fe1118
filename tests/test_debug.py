"""`run(debug=True)` with real job processes: the job listens with debugpy and waits for a debugger; a Debug
Adapter Protocol client (this file's, over a raw socket) attaches at the address `debug_attach` and
`kinetic-tui jobs debug` give, lets the job go on, and the job returns its value."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

import kinetic_tui as kinetic
from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.gke.port_forward import kubectl_command
from kinetic_tui.core.debugging import DebugError
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.profiles import resolve_infra
from tests.helpers.dap import attach_and_continue
from tests.lifecycle.backend_projects import wait_for
from tests.lifecycle.run_projects import load_module, make_project, stop_jobs

TIMEOUT = 60.0

TASKS = """
import kinetic_tui as kinetic


@kinetic.run(debug=True)
def add(a, b):
    return a + b


@kinetic.run()
def plain(x):
    return x
"""


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("KINETIC_DEBUG_WAIT_TIMEOUT", "45")
    project = make_project(tmp_path / "proj", {"kt_debug/__init__.py": "", "kt_debug/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_debug.tasks")


def test_a_debug_job_waits_for_a_debugger_at_the_address_debug_attach_prints(
    tasks: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    handle = tasks.add.run_async(2, 3)
    assert handle.debug and kinetic.attach(handle.job_id).debug
    with handle.debug_attach(timeout=TIMEOUT) as session:
        printed = capsys.readouterr().out
        assert session.host == "127.0.0.1" and session.port > 0
        assert f'"port": {session.port}' in printed and '"request": "attach"' in printed
        wait_for(lambda: any("waiting up to" in line for line in handle.log_lines()), TIMEOUT, "the job to wait")
        assert handle.status() is JobStatus.RUNNING  # held before the function: nobody attached yet
        assert not any("debugger attached" in line for line in handle.log_lines())
        events = attach_and_continue(session.host, session.port)
    assert events == ["stopped", "breakpoint"]
    assert handle.result(timeout=TIMEOUT) == 5
    assert any("debugger attached" in line for line in handle.log_lines())


def test_jobs_debug_prints_the_address_and_a_non_debug_job_is_refused(tasks: ModuleType) -> None:
    handle = tasks.add.run_async(4, 5)
    runner = CliRunner()
    done = runner.invoke(main, ["jobs", "debug", handle.job_id, "--timeout", str(TIMEOUT)])
    assert done.exit_code == 0, done.output
    address = next(line for line in done.output.splitlines() if line.startswith("attach to "))
    host, port = address.removeprefix("attach to ").split(":")
    attach_and_continue(host, int(port))
    assert handle.result(timeout=TIMEOUT) == 9

    other = tasks.plain.run_async(1)
    refused = runner.invoke(main, ["jobs", "debug", other.job_id])
    assert refused.exit_code == 1 and "was not submitted with debug=True" in refused.output
    assert refused.output.count("\n") == 1
    assert other.result(timeout=TIMEOUT) == 1


def test_without_a_debugger_the_job_runs_on_after_the_wait(tasks: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_DEBUG_WAIT_TIMEOUT", "0.3")
    handle = tasks.add.run_async(1, 1)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 2
    assert any("no debugger attached within 0.3 s" in line for line in handle.log_lines())


def test_a_blocking_debug_call_without_a_terminal_is_refused_before_submitting(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115 (pytest restores it)
    with pytest.raises(DebugError, match="needs an interactive terminal"):
        tasks.add(1, 2)
    assert kinetic.list_jobs() == []


def test_debug_attach_on_a_job_that_ended_first_says_so(tasks: ModuleType) -> None:
    handle = tasks.plain.run_async(3)
    with pytest.raises(DebugError, match="not submitted with debug=True"):
        handle.debug_attach()
    with pytest.raises(ValidationError, match="debug must be True or False"):
        kinetic.run(debug="yes")(lambda: None)


def test_the_gke_port_forward_names_the_same_api_server_as_the_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    infra = resolve_infra(backend="gke", project="p", zone="us-central1-a", cluster="c", namespace="ns")
    assert kubectl_command(infra, "job-0123abcd-x", 5678, 6000) == [
        "kubectl",
        "--context",
        "gke_p_us-central1-a_c",
        "port-forward",
        "--address",
        "127.0.0.1",
        "pod/job-0123abcd-x",
        "6000:5678",
        "-n",
        "ns",
    ]
    monkeypatch.setenv("KINETIC_K8S_HOST", "http://127.0.0.1:9999")
    assert kubectl_command(infra, "pod-a", 5678, 5678)[1:3] == ["--server", "http://127.0.0.1:9999"]
