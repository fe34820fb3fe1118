"""Stack state: the entry points against a fake StackBackend, and the real AutomationBackend's preflight
against this machine (no Pulumi CLI), fake-gcs-server and small local HTTP doubles of the GCS JSON API.
"""

from __future__ import annotations

import http.server
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timezone
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from pulumi import automation as auto
from pulumi.automation._cmd import CommandResult

from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.infra import InfraConfig, NodePoolSpec
from kinetic_tui.infra.state import (
    AutomationBackend,
    CredentialsError,
    DestroyResult,
    PulumiCliMissingError,
    StackOperationError,
    StackRef,
    StackState,
    StateBackendError,
    UpdateResult,
    _guarded,
    apply_destroy,
    apply_update,
    error_line,
    load_state,
    output_values,
    resource_changes,
)
from tests.infra import PROJECT, run_under_mocks

pytestmark = pytest.mark.filterwarnings(r"ignore:gcp\..*deprecated:DeprecationWarning")

CONFIG = InfraConfig(PROJECT, "us-east5-a", "train", (NodePoolSpec("v6e", "v6e-4x4", max_nodes=4),))
REF = StackRef(PROJECT, f"{PROJECT}-train", f"gs://{PROJECT}-kinetic-state")


class FakeBackend:
    """A StackBackend that keeps one stack in memory and records every call."""

    def __init__(self, exists: bool = False) -> None:
        self.exists = exists
        self.calls: list[tuple[str, StackRef]] = []
        self.programs: list[Callable[[], None]] = []

    def read(self, ref: StackRef) -> StackState:
        self.calls.append(("read", ref))
        return StackState(ref, self.exists, {"cluster_name": "train"} if self.exists else {})

    def up(self, ref: StackRef, program: Callable[[], None], on_output: Any) -> UpdateResult:
        self.calls.append(("up", ref))
        self.programs.append(program)
        on_output("+ created")
        self.exists = True
        return UpdateResult(ref, {"create": 1}, {"cluster_name": "train"})

    def destroy(self, ref: StackRef, on_output: Any) -> DestroyResult:
        self.calls.append(("destroy", ref))
        on_output("- deleted")
        self.exists = False
        return DestroyResult(ref, {"delete": 1})


def test_the_stack_lives_in_the_project_state_bucket():
    assert StackRef.for_config(CONFIG) == REF
    assert REF.state_bucket == f"{PROJECT}-kinetic-state"


def test_load_state_reads_the_configs_stack():
    backend = FakeBackend(exists=True)
    state = load_state(CONFIG, backend)
    assert state.exists and state.outputs == {"cluster_name": "train"}
    assert backend.calls == [("read", REF)]


def test_apply_update_hands_the_backend_this_configs_program():
    backend, lines = FakeBackend(), []
    result = apply_update(CONFIG, backend, on_output=lines.append)
    assert result.changes == {"create": 1} and lines == ["+ created"] and backend.calls == [("up", REF)]
    mocks, _ = run_under_mocks(backend.programs[0])  # the program really declares this config
    pools = {inputs["name"]: inputs for kind, inputs in mocks.resources.values() if kind.endswith("nodePool:NodePool")}
    assert set(pools) == {"system", "v6e"}
    assert pools["v6e"]["placementPolicy"]["tpuTopology"] == "4x4"


def test_apply_destroy_of_a_missing_stack_changes_nothing():
    backend = FakeBackend(exists=False)
    with pytest.raises(NotFoundError, match=f"no stack '{PROJECT}-train' in gs://{PROJECT}-kinetic-state"):
        apply_destroy(CONFIG, backend)
    assert backend.calls == [("read", REF)]


def test_apply_destroy_of_an_existing_stack():
    backend, lines = FakeBackend(exists=True), []
    assert apply_destroy(CONFIG, backend, on_output=lines.append).changes == {"delete": 1}
    assert [name for name, _ in backend.calls] == ["read", "destroy"] and lines == ["- deleted"]


@pytest.mark.parametrize("call", [load_state, apply_update, apply_destroy])
def test_a_config_of_the_wrong_type_is_refused(call):
    backend = FakeBackend()
    with pytest.raises(ValidationError, match="config must be an infra.InfraConfig, not dict"):
        call({"project": PROJECT}, backend)
    assert backend.calls == []


# ---------------------------------------------------------------------------------------------------------
# The real backend's preflight: one clear message per set-up problem, never a hang


@pytest.mark.skipif(shutil.which("pulumi") is not None, reason="a Pulumi CLI is installed here")
@pytest.mark.parametrize("call", [load_state, apply_update, apply_destroy])
def test_real_backend_without_the_pulumi_cli_says_how_to_install_it(call):
    with pytest.raises(PulumiCliMissingError) as info:
        call(CONFIG)
    message = str(info.value)
    assert "`pulumi` CLI is not on PATH; install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh" in message
    assert "\n" not in message and isinstance(info.value, KineticError)


def _has_pulumi(_name: str) -> str:
    return "/opt/fake/bin/pulumi"


def test_missing_credentials_name_the_login_command(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    hint = "no Google Cloud credentials found; run `gcloud auth application-default login`"
    with pytest.raises(CredentialsError, match=hint):
        AutomationBackend(which=_has_pulumi).read(REF)


def _anonymous() -> AnonymousCredentials:
    return AnonymousCredentials()


def test_missing_state_bucket_says_how_to_create_it(gcs_emulator):
    with pytest.raises(StateBackendError) as info:
        AutomationBackend(which=_has_pulumi, credentials=_anonymous).read(REF)
    bucket = f"gs://{PROJECT}-kinetic-state"
    assert str(info.value) == (
        f"the Pulumi state bucket {bucket} does not exist; create it with "
        f"`gcloud storage buckets create {bucket} --project {PROJECT} --uniform-bucket-level-access`"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_state_backend(monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{_closed_port()}")
    unreachable = r"cannot reach the Pulumi state backend gs://acme-ml-kinetic-state \(ConnectionError"
    with pytest.raises(StateBackendError, match=unreachable):
        AutomationBackend(which=_has_pulumi, credentials=_anonymous, timeout=1).read(REF)


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A socket that accepts connections and never answers: a backend that would hang a naive client."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_silent_state_backend_times_out(monkeypatch, silent_server):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", silent_server)
    with pytest.raises(StateBackendError, match=r"\(ReadTimeout, timeout 0.3s\)"):
        AutomationBackend(which=_has_pulumi, credentials=_anonymous, timeout=0.3).read(REF)


class _ForbiddenGcs(http.server.BaseHTTPRequestHandler):
    """Test double of the GCS JSON API that answers every request 403, as for a bucket one may not read."""

    def do_GET(self) -> None:
        body = b'{"error": {"code": 403, "message": "caller does not have storage.buckets.get access"}}'
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_forbidden_state_bucket_is_a_credentials_problem(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ForbiddenGcs)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
        denied = "may not read gs://acme-ml-kinetic-state; grant them roles/storage.objectAdmin"
        with pytest.raises(CredentialsError, match=denied):
            AutomationBackend(which=_has_pulumi, credentials=_anonymous).read(REF)
    finally:
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------------------------------------------
# Translating Automation API results and errors (real pulumi.automation types)


def _command_error(kind: type[auto.CommandError], stderr: str) -> auto.CommandError:
    return kind(CommandResult("", stderr, 255))


def test_a_locked_stack_says_how_to_unlock_it():
    with pytest.raises(StackOperationError, match=f"locked by another update.*pulumi cancel --stack {REF.stack}"):
        _guarded(auto, "up", REF, lambda: (_ for _ in ()).throw(_command_error(auto.ConcurrentUpdateError, "locked")))


def test_a_failed_command_keeps_its_error_line():
    stderr = "Updating (acme)\n  gcp:container:Cluster cluster creating\nerror: googleapi: Error 403: quota exceeded\n"
    exc = _command_error(auto.CommandError, stderr)
    with pytest.raises(StackOperationError) as info:
        _guarded(auto, "up", REF, lambda: (_ for _ in ()).throw(exc))
    assert str(info.value) == f"pulumi up of stack '{REF.stack}' failed: error: googleapi: Error 403: quota exceeded"


def test_error_line_falls_back_to_the_last_line():
    assert error_line(str(CommandResult("", "first\nlast words\n", 1))) == "last words"
    assert error_line(str(CommandResult("plan failed\n", "", 1))) == "plan failed"
    assert error_line(str(CommandResult("", "", 1))) == "code: 1"


def test_summaries_and_outputs_become_plain_values():
    summary = auto.UpdateSummary(
        kind="update",
        start_time=datetime.now(UTC),
        message="",
        environment={},
        config={},
        result="succeeded",
        resource_changes={"create": 3, "same": 2},
    )
    assert resource_changes(summary) == {"create": 3, "same": 2}
    outputs = {"cluster_name": auto.OutputValue("train", False), "token": auto.OutputValue("s3cr3t", True)}
    assert output_values(outputs) == {"cluster_name": "train", "token": "[secret]"}
