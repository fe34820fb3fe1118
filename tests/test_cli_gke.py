"""The CLI on a gke profile: up/down/status/pool against a fake StackBackend (programs checked under Pulumi
mocks), the real AutomationBackend on this machine (no Pulumi CLI), build-image against the local Cloud
Build double of tests/infra, and the desired node pools in state.db (core/backends/gke/pools.py)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timezone
from functools import partial
from typing import Any

import pytest
from click.testing import CliRunner
from google.auth.credentials import AnonymousCredentials

from kinetic_tui.cli import gke as cli_gke
from kinetic_tui.cli.main import main
from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.backends.gke.backend import JobState
from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.store import Store
from kinetic_tui.infra import NodePoolSpec
from kinetic_tui.infra import container_builder as builder
from kinetic_tui.infra.state import DestroyResult, StackRef, StackState, UpdateResult
from tests.infra import run_under_mocks
from tests.infra.test_container_builder import CloudBuildDouble, _serve

pytestmark = pytest.mark.filterwarnings(r"ignore:gcp\..*deprecated:DeprecationWarning")

PROJECT, CLUSTER, ZONE = "acme-ml", "train", "us-east5-a"
STACK = f"{PROJECT}-{CLUSTER}"
NO_PULUMI = pytest.mark.skipif(shutil.which("pulumi") is not None, reason="a Pulumi CLI is installed here")


class FakeStack:
    """A StackBackend holding one stack in memory; records every call and the programs it was given."""

    def __init__(self, exists: bool = False) -> None:
        self.exists = exists
        self.calls: list[str] = []
        self.programs: list[Callable[[], None]] = []
        self.pools: list[str] = []

    def read(self, ref: StackRef) -> StackState:
        self.calls.append("read")
        outputs = {"cluster_name": CLUSTER, "node_pools": ["system", *self.pools]} if self.exists else {}
        return StackState(
            ref,
            self.exists,
            outputs,
            "succeeded" if self.exists else None,
            datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC) if self.exists else None,
        )

    def up(self, ref: StackRef, program: Callable[[], None], on_output: Any) -> UpdateResult:
        self.calls.append("up")
        self.programs.append(program)
        on_output("+  gcp:container:NodePool creating")
        self.exists = True
        return UpdateResult(ref, {"create": 3, "same": 20}, {"cluster_name": CLUSTER})

    def destroy(self, ref: StackRef, on_output: Any) -> DestroyResult:
        self.calls.append("destroy")
        on_output("-  gcp:container:Cluster deleting")
        self.exists = False
        return DestroyResult(ref, {"delete": 23})


@pytest.fixture
def gke(monkeypatch: pytest.MonkeyPatch) -> FakeStack:
    """A gke profile (current) whose stack backend is a FakeStack."""
    stack = FakeStack()
    monkeypatch.setattr(cli_gke, "stack_backend", lambda: stack)
    assert (
        cli(
            "profile",
            "create",
            "prod",
            "--backend",
            "gke",
            "--project",
            PROJECT,
            "--cluster",
            CLUSTER,
            "--zone",
            ZONE,
            "--use",
        ).exit_code
        == 0
    )
    return stack


def cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def recorded() -> tuple[NodePoolSpec, ...]:
    return GkePools(Store(), PROJECT, CLUSTER).list()


def declared_pools(program: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """The node pools a stack program declares, by name, with their inputs (run under Pulumi mocks)."""
    mocks, _ = run_under_mocks(program)
    return {inputs["name"]: inputs for kind, inputs in mocks.resources.values() if kind.endswith("nodePool:NodePool")}


def one_line_error(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output, result.output
    return result.stderr


# -- up, down, status with a fake stack -------------------------------------------------------------------


def test_up_applies_the_recorded_pools(gke: FakeStack) -> None:
    assert cli("pool", "add", "l4", "--accelerator", "l4x2", "--nodes", "3", "--spot", "--no-apply").exit_code == 0
    assert (
        cli("pool", "add", "tpu", "--accelerator", "v5e-2x4", "--nodes", "2", "--min", "1", "--no-apply").exit_code == 0
    )
    assert gke.calls == [] and [p.name for p in recorded()] == ["l4", "tpu"]  # --no-apply: only recorded
    result = cli("up", "--yes")
    assert result.exit_code == 0, result.output
    assert "NodePool creating" in result.output and f"stack {STACK}: 3 create, 20 same" in result.output
    pools = declared_pools(gke.programs[0])
    assert set(pools) == {"system", "l4", "tpu"}
    l4, tpu = pools["l4"], pools["tpu"]
    assert l4["nodeConfig"]["machineType"] == parse_accelerator("l4x2").machine_type
    assert l4["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-l4" and l4["nodeConfig"]["spot"] is True
    assert l4["autoscaling"] == {"minNodeCount": 0, "maxNodeCount": 3}
    assert tpu["nodeConfig"]["machineType"] == parse_accelerator("v5e-2x4").machine_type
    assert tpu["autoscaling"] == {"minNodeCount": 1, "maxNodeCount": 2} and tpu["location"] == ZONE


def test_up_asks_first_and_a_no_changes_nothing(gke: FakeStack) -> None:
    refused = cli("up", input="n\n")
    assert refused.exit_code == 1 and f"create or update stack {STACK}" in refused.output
    assert gke.calls == []


def test_up_json_keeps_progress_off_stdout(gke: FakeStack) -> None:
    result = CliRunner().invoke(main, ["up", "--yes", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "stack": STACK,
        "changes": {"create": 3, "same": 20},
        "outputs": {"cluster_name": CLUSTER},
    }
    assert "NodePool creating" in result.stderr


def test_down_asks_then_destroys(gke: FakeStack) -> None:
    gke.exists = True
    refused = cli("down", input="n\n")
    assert refused.exit_code == 1 and f"destroy stack {STACK}" in refused.output and "destroy" not in gke.calls
    result = cli("down", input="y\n")
    assert result.exit_code == 0, result.output
    assert gke.calls == ["read", "destroy"] and f"stack {STACK} destroyed: 23 delete" in result.output


def test_down_of_a_missing_stack_is_one_line(gke: FakeStack) -> None:
    assert f"no stack '{STACK}'" in one_line_error(cli("down", "--yes"))
    assert gke.calls == ["read"]


class FakeCluster:
    """The two GkeBackend methods `status` uses; with `hold`, the job list answers only once it is set (a
    silent API server), and `answered` says whether it has."""

    def __init__(self, states: dict[str, JobStatus], hold: threading.Event | None = None) -> None:
        self.states, self.hold, self.answered = states, hold, threading.Event()

    def job_ids(self) -> list[str]:
        if self.hold is not None:
            self.hold.wait(60)  # a deadline, so that a failed test still ends
        self.answered.set()
        return list(self.states)

    def refresh(self, job_id: str) -> JobState:
        return JobState(job_id, self.states[job_id])


def test_status_prints_outputs_and_the_clusters_jobs(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    gke.exists = True
    cluster = FakeCluster({"job-1": JobStatus.RUNNING, "job-2": JobStatus.RUNNING, "job-3": JobStatus.FAILED})
    monkeypatch.setattr(cli_gke, "cluster_backend", lambda infra: cluster)
    result = cli("status")
    assert result.exit_code == 0, result.output
    assert f"stack {STACK}: last update succeeded at 2026-01-02 03:04:05" in result.output
    assert f"cluster_name: {CLUSTER}" in result.output and "jobs: failed 1, running 2" in result.output
    summary = json.loads(cli("status", "--json").output)
    assert summary["stack"]["outputs"]["cluster_name"] == CLUSTER
    assert summary["jobs"] == {"RUNNING": 2, "FAILED": 1} and summary["cluster_error"] is None


def test_status_before_up_says_how_to_create_the_stack(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_gke, "cluster_backend", lambda infra: pytest.fail("no stack: no cluster to ask"))
    result = cli("status")
    assert result.exit_code == 0 and "does not exist" in result.output and "kinetic-tui up" in result.output


def test_a_silent_cluster_is_one_line_not_a_hang(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    gke.exists = True
    silent = FakeCluster({}, hold=threading.Event())
    monkeypatch.setattr(cli_gke, "cluster_backend", lambda infra: silent)
    monkeypatch.setattr(cli_gke, "STATUS_TIMEOUT", 0.3)
    try:
        result = cli("status")
        assert not silent.answered.is_set()  # status returned without the cluster's answer: it did not hang
    finally:
        silent.hold.set()
    assert result.exit_code == 0
    [line] = [line for line in result.output.splitlines() if "unreachable" in line]
    assert "TimeoutError" in line and "get-credentials train --zone us-east5-a" in line


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_refused_api_server_is_one_line(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    gke.exists = True
    port = _closed_port()
    monkeypatch.setenv("KINETIC_K8S_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    summary = json.loads(cli("status", "--json").output)
    assert summary["jobs"] is None and f"cluster {CLUSTER} unreachable" in summary["cluster_error"]


# -- pools --------------------------------------------------------------------------------------------------


def test_pool_add_records_and_applies(gke: FakeStack) -> None:
    result = cli("pool", "add", "gpus", "--accelerator", "nvidia-l4", "--nodes", "4")
    assert result.exit_code == 0, result.output
    assert gke.calls == ["read", "up"] and f"node pool gpus added; stack {STACK}: 3 create" in result.output
    assert recorded() == (NodePoolSpec("gpus", "l4x1", max_nodes=4),)
    assert set(declared_pools(gke.programs[0])) == {"system", "gpus"}


def test_pool_list_shows_which_pools_the_stack_has(gke: FakeStack) -> None:
    cli("pool", "add", "a", "--accelerator", "l4", "--nodes", "1", "--no-apply")
    cli("pool", "add", "b", "--accelerator", "t4", "--nodes", "1", "--no-apply")
    gke.exists, gke.pools = True, ["a"]
    rows = json.loads(cli("pool", "list", "--json").output)
    assert [(r["name"], r["accelerator"], r["exists"]) for r in rows] == [("a", "l4x1", True), ("b", "t4x1", False)]


def test_pool_remove_forgets_and_applies(gke: FakeStack) -> None:
    cli("pool", "add", "a", "--accelerator", "l4", "--nodes", "1", "--no-apply")
    cli("pool", "add", "b", "--accelerator", "t4", "--nodes", "1", "--no-apply")
    result = cli("pool", "remove", "a", "--yes")
    assert result.exit_code == 0, result.output
    assert [p.name for p in recorded()] == ["b"] and set(declared_pools(gke.programs[-1])) == {"system", "b"}
    missing = one_line_error(cli("pool", "remove", "a", "--yes"))
    assert "no node pool 'a'" in missing and "pools: b" in missing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("BAD", "--accelerator", "l4", "--nodes", "1"), "node pool name 'BAD' must match"),
        (("system", "--accelerator", "l4", "--nodes", "1"), "reserved for the system pool"),
        (("x", "--accelerator", "a100x3", "--nodes", "1"), "1, 2, 4, 8, 16"),
        (("x", "--accelerator", "v6e-4x4", "--nodes", "2"), "one 4-node slice"),
        (("x", "--accelerator", "l4", "--nodes", "1", "--min", "2"), "must be >= 1 and >= min_nodes (2)"),
        (("x", "--accelerator", "l4:spot", "--nodes", "1"), "already provides spot l4x1"),
        (("a", "--accelerator", "t4", "--nodes", "1"), "node pool 'a' already exists"),
    ],
)
def test_bad_pools_are_one_line_and_record_nothing(gke: FakeStack, args: tuple[str, ...], message: str) -> None:
    cli("pool", "add", "a", "--accelerator", "l4", "--spot", "--nodes", "1", "--no-apply")
    before = recorded()
    assert message in one_line_error(cli("pool", "add", *args))
    assert recorded() == before


def test_gke_flags_are_refused_on_a_local_profile() -> None:
    result = cli("pool", "add", "x", "--accelerator", "l4", "--nodes", "1", "--no-apply")
    assert result.exit_code == 2 and "--no-apply only apply to a gke profile" in result.output


def test_gke_pools_store_keeps_clusters_apart_and_canonical() -> None:
    store = Store()
    train, serve = GkePools(store, PROJECT, "train"), GkePools(store, PROJECT, "serve")
    spec = train.add("tpus", "v5e-2x2:spot", max_nodes=2)
    assert spec == NodePoolSpec("tpus", "v5litepod-2x2", max_nodes=2, spot=True)
    assert serve.list() == () and serve.add("tpus", "v5e-2x2", max_nodes=1).name == "tpus"
    with pytest.raises(ValidationError, match="already provides spot v5litepod-2x2"):
        train.add("other", "v5litepod-2x2", max_nodes=2, spot=True)
    with pytest.raises(NotFoundError, match="pools: tpus"):
        train.remove("nope")
    assert train.remove("tpus") == spec and train.list() == ()


# -- the real AutomationBackend on this machine ----------------------------------------------------------


@NO_PULUMI
@pytest.mark.parametrize(
    "command",
    [("up", "--yes"), ("down", "--yes"), ("status",), ("pool", "add", "x", "--accelerator", "l4", "--nodes", "1")],
)
def test_without_the_pulumi_cli_each_command_says_how_to_install_it(command: tuple[str, ...]) -> None:
    cli("profile", "create", "prod", "--backend", "gke", "--project", PROJECT, "--use")
    output = one_line_error(cli(*command))
    assert "install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh" in output
    assert recorded() == ()


def test_missing_gcp_extra_names_the_install_command(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kinetic_tui.infra.program", None)
    assert "pip install 'kinetic-tui[gcp]'" in one_line_error(cli("up", "--yes"))


def test_a_bad_profile_value_says_how_to_fix_it() -> None:
    cli("profile", "create", "prod", "--backend", "gke", "--project", "acme", "--use")
    output = one_line_error(cli("up", "--yes"))
    assert "project 'acme' must match" in output and "profile use local" in output


# -- build-image ---------------------------------------------------------------------------------------------


def _ensurer_at(url: str) -> Callable[[Any], Callable[[builder.ImageInputs], builder.ImageBuild]]:
    """An `image_ensurer` whose registry and Cloud Build calls go to the double serving at `url`."""

    def ensurer(infra: Any) -> Callable[[builder.ImageInputs], builder.ImageBuild]:
        return partial(
            builder.ensure_image,
            project=infra.project,
            region=infra.region,
            cluster=infra.cluster,
            exists=partial(builder.registry_has_tag, token="test-token", registry=url),
            upload=lambda bucket, name, data: None,
            poll_interval=0.01,
            client=builder.cloud_build_client(api_endpoint=url, credentials=AnonymousCredentials()),
        )

    return ensurer


@pytest.fixture
def cloud_build(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudBuildDouble]:
    """build-image's ensure function pointed at the Cloud Build / registry double of tests/infra."""
    for double in _serve():
        monkeypatch.setattr(cli_gke, "image_ensurer", _ensurer_at(double.url))
        yield double


def test_build_image_builds_then_is_up_to_date(cloud_build: CloudBuildDouble, tmp_path: Any) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy>=1.26\n")
    inputs = builder.image_inputs("l4", "numpy>=1.26\n")
    tag = builder.image_tag(PROJECT, "us-east5", CLUSTER, inputs)
    args = ("build-image", "--accelerator", "l4", "--requirements", str(requirements))
    first = cli(*args)
    assert first.exit_code == 0, first.output
    assert tag in first.output and "built" in first.output and len(cloud_build.of("POST", "/v1/projects")) == 1
    cloud_build.existing.add(tag.split("/", 1)[1])
    second = json.loads(cli(*args, "--json").output)
    assert second == {"tag": tag, "built": False, "build_id": None, "log_url": None}
    assert len(cloud_build.of("POST", "/v1/projects")) == 1  # no second build
    assert "up to date" in cli(*args).output


def test_build_image_refuses_a_bad_accelerator(cloud_build: CloudBuildDouble) -> None:
    assert "invalid accelerator 'zz'" in one_line_error(cli("build-image", "--accelerator", "zz"))
    assert cloud_build.requests == []


def test_build_image_without_cloud_build_sdk(gke: FakeStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builder, "registry_has_tag", lambda tag: False)
    monkeypatch.setitem(sys.modules, "google.cloud.devtools.cloudbuild_v1", None)
    assert "pip install 'kinetic-tui[gcp]'" in one_line_error(cli("build-image"))
