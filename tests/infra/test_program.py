"""The Pulumi program under `pulumi.runtime.set_mocks`: no engine, no cloud.

The mocks (tests/infra/__init__.py) echo each resource's inputs back as its outputs and record every
registration, so the tests assert on exactly what the program would send to the GCP provider.
"""

from __future__ import annotations

from typing import Any

import pytest

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.infra import InfraConfig, NodePoolSpec, service_account_email, service_account_id
from kinetic_tui.infra.program import BUILD_RETENTION_DAYS, REQUIRED_APIS, define
from tests.infra import PROJECT, RecordingMocks, Resources, run_under_mocks

# pulumi_gcp warns about its own deprecated aliases when a submodule loads; not ours to fix.
pytestmark = pytest.mark.filterwarnings(r"ignore:gcp\..*deprecated:DeprecationWarning")

ZONE, CLUSTER = "us-central2-b", "train"
CONFIG = InfraConfig(
    PROJECT,
    ZONE,
    CLUSTER,
    (
        NodePoolSpec("l4", "l4x2", min_nodes=0, max_nodes=3),
        NodePoolSpec("h100", "h100x8:spot", max_nodes=2),
        NodePoolSpec("v5e-single", "v5litepod-2x2", min_nodes=1, max_nodes=4, reservation="my-resv"),
        NodePoolSpec("v5e-slice", "v5litepod-4x4", min_nodes=0, max_nodes=4, spot=True),
        NodePoolSpec("cpu", "cpu", max_nodes=5),
    ),
)


def run_program(config: InfraConfig) -> tuple[RecordingMocks, dict[str, Any]]:
    return run_under_mocks(lambda: define(config))


@pytest.fixture(scope="module")
def program() -> tuple[RecordingMocks, dict[str, Any]]:
    return run_program(CONFIG)


@pytest.fixture(scope="module")
def resources(program) -> Resources:
    return program[0].resources


def of_type(resources, typ: str) -> dict[str, dict[str, Any]]:
    return {name: inputs for name, (kind, inputs) in resources.items() if kind == typ}


def pool(resources, name: str) -> dict[str, Any]:
    return of_type(resources, "gcp:container/nodePool:NodePool")[f"pool-{name}"]


def test_required_apis_are_enabled(resources):
    services = of_type(resources, "gcp:projects/service:Service").values()
    assert sorted(s["service"] for s in services) == sorted(f"{api}.googleapis.com" for api in REQUIRED_APIS)


def test_one_node_pool_per_accelerator_plus_system(resources):
    pools = of_type(resources, "gcp:container/nodePool:NodePool")
    assert sorted(p["name"] for p in pools.values()) == ["cpu", "h100", "l4", "system", "v5e-single", "v5e-slice"]
    assert all(p["location"] == ZONE and p["nodeLocations"] == [ZONE] for p in pools.values())


def test_gpu_pool_machine_type_and_guest_accelerators(resources):
    l4 = pool(resources, "l4")["nodeConfig"]
    assert l4["machineType"] == "g2-standard-24"
    [guest] = l4["guestAccelerators"]
    assert (guest["type"], guest["count"]) == ("nvidia-l4", 2)
    assert guest["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "LATEST"}
    assert l4["spot"] is False
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"} in l4["taints"]
    h100 = pool(resources, "h100")["nodeConfig"]
    assert h100["machineType"] == "a3-highgpu-8g"
    assert [(g["type"], g["count"]) for g in h100["guestAccelerators"]] == [("nvidia-h100-80gb", 8)]


def test_spot_from_suffix_or_flag_adds_spot_taint(resources):
    for name in ("h100", "v5e-slice"):  # `:spot` suffix, then spot=True
        node_config = pool(resources, name)["nodeConfig"]
        assert node_config["spot"] is True
        assert {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NO_SCHEDULE"} in node_config["taints"]
    assert all(t["key"] != "cloud.google.com/gke-spot" for t in pool(resources, "l4")["nodeConfig"]["taints"])


def test_tpu_pools_machine_type_and_topology(resources):
    single = pool(resources, "v5e-single")
    assert single["nodeConfig"]["machineType"] == "ct5lp-hightpu-4t"
    assert "guestAccelerators" not in single["nodeConfig"]
    assert "placementPolicy" not in single  # a single-host slice needs no placement
    multi = pool(resources, "v5e-slice")
    assert multi["nodeConfig"]["machineType"] == "ct5lp-hightpu-4t"
    assert multi["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
    assert {"key": "google.com/tpu", "value": "present", "effect": "NO_SCHEDULE"} in multi["nodeConfig"]["taints"]
    assert multi["nodeConfig"]["labels"] == {"kinetic/pool": "v5e-slice", "kinetic/category": "tpu"}


def test_autoscaling_bounds(resources):
    bounds = {name: pool(resources, name)["autoscaling"] for name in ("l4", "h100", "v5e-single", "v5e-slice", "cpu")}
    assert {name: (b["minNodeCount"], b["maxNodeCount"]) for name, b in bounds.items()} == {
        "l4": (0, 3),
        "h100": (0, 2),
        "v5e-single": (1, 4),
        "v5e-slice": (0, 4),
        "cpu": (0, 5),
    }
    assert pool(resources, "system")["autoscaling"] == {"minNodeCount": 1, "maxNodeCount": 3}


def test_reservation_and_cpu_pool(resources):
    affinity = pool(resources, "v5e-single")["nodeConfig"]["reservationAffinity"]
    assert affinity == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["my-resv"],
    }
    cpu = pool(resources, "cpu")["nodeConfig"]
    assert cpu["machineType"] == "e2-standard-8" and cpu["taints"] == []
    assert "reservationAffinity" not in pool(resources, "l4")["nodeConfig"]


def test_buckets_and_lifecycle_rules(resources):
    buckets = of_type(resources, "gcp:storage/bucket:Bucket")
    assert buckets["jobs-bucket"]["name"] == f"{PROJECT}-kn-{CLUSTER}-jobs"
    assert buckets["builds-bucket"]["name"] == f"{PROJECT}-kn-{CLUSTER}-builds"
    [rule] = buckets["builds-bucket"]["lifecycleRules"]
    assert rule["action"] == {"type": "Delete"} and rule["condition"]["age"] == BUILD_RETENTION_DAYS == 7
    [jobs_rule] = buckets["jobs-bucket"]["lifecycleRules"]
    assert jobs_rule["action"] == {"type": "AbortIncompleteMultipartUpload"}
    assert all(b["location"] == "us-central2" and b["uniformBucketLevelAccess"] for b in buckets.values())


def test_artifact_registry_repo(resources):
    [repo] = of_type(resources, "gcp:artifactregistry/repository:Repository").values()
    assert (repo["repositoryId"], repo["format"], repo["location"]) == (f"kn-{CLUSTER}", "DOCKER", "us-central2")


def test_private_cluster_settings(resources):
    [cluster] = of_type(resources, "gcp:container/cluster:Cluster").values()
    assert cluster["name"] == CLUSTER and cluster["location"] == ZONE
    assert cluster["privateClusterConfig"]["enablePrivateNodes"] is True
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "pods",
        "servicesSecondaryRangeName": "services",
    }
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["network"] == "network-id" and cluster["subnetwork"] == "subnetwork-id"


def test_network_router_and_nat(resources):
    [subnet] = of_type(resources, "gcp:compute/subnetwork:Subnetwork").values()
    assert subnet["privateIpGoogleAccess"] is True and subnet["network"] == "network-id"
    assert {r["rangeName"] for r in subnet["secondaryIpRanges"]} == {"pods", "services"}
    [nat] = of_type(resources, "gcp:compute/routerNat:RouterNat").values()
    assert nat["router"] == f"kn-{CLUSTER}" and nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"


def test_service_accounts_and_scoped_grants(resources):
    accounts = of_type(resources, "gcp:serviceaccount/account:Account")
    assert {a["accountId"] for a in accounts.values()} == {f"kn-{CLUSTER}-node", f"kn-{CLUSTER}-build"}
    node = f"serviceAccount:{service_account_email(PROJECT, CLUSTER, 'node')}"
    build = f"serviceAccount:{service_account_email(PROJECT, CLUSTER, 'build')}"
    bucket_grants = {
        (g["bucket"], g["role"], g["member"])
        for g in of_type(resources, "gcp:storage/bucketIAMMember:BucketIAMMember").values()
    }
    assert bucket_grants == {
        (f"{PROJECT}-kn-{CLUSTER}-jobs", "roles/storage.objectAdmin", node),
        (f"{PROJECT}-kn-{CLUSTER}-builds", "roles/storage.objectAdmin", build),
    }
    repo_grants = {
        (g["role"], g["member"])
        for g in of_type(resources, "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember").values()
    }
    assert repo_grants == {("roles/artifactregistry.reader", node), ("roles/artifactregistry.writer", build)}
    project_members = {g["member"] for g in of_type(resources, "gcp:projects/iAMMember:IAMMember").values()}
    assert project_members == {node, build}
    for name in ("l4", "system"):
        assert pool(resources, name)["nodeConfig"]["serviceAccount"] == node.removeprefix("serviceAccount:")


def test_every_resource_uses_the_pinned_provider(program):
    mocks = program[0]
    kind, inputs = mocks.resources["gcp"]
    assert kind == "pulumi:providers:gcp"
    assert (inputs["project"], inputs["region"], inputs["zone"]) == (PROJECT, "us-central2", ZONE)
    others = {name: ref for name, ref in mocks.providers.items() if name != "gcp"}
    assert len(others) > 30 and all(
        ref and ref.startswith("urn:pulumi:") and "::gcp::gcp-id" in ref for ref in others.values()
    ), others


def test_exports(program):
    _, exports = program
    assert exports["cluster_name"] == CLUSTER and exports["cluster_endpoint"] == "203.0.113.10"
    assert exports["jobs_bucket"] == f"{PROJECT}-kn-{CLUSTER}-jobs"
    assert exports["builds_bucket"] == f"{PROJECT}-kn-{CLUSTER}-builds"
    assert exports["repository_url"] == f"us-central2-docker.pkg.dev/{PROJECT}/kn-{CLUSTER}"
    assert exports["node_pools"] == ["system", "l4", "h100", "v5e-single", "v5e-slice", "cpu"]
    assert exports["build_service_account"] == service_account_email(PROJECT, CLUSTER, "build")


def test_cluster_without_accelerator_pools_has_only_the_system_pool():
    mocks, exports = run_program(InfraConfig(PROJECT, "europe-west4-a", "bare"))
    assert [p["name"] for p in of_type(mocks.resources, "gcp:container/nodePool:NodePool").values()] == ["system"]
    assert exports["repository_url"] == f"europe-west4-docker.pkg.dev/{PROJECT}/kn-bare"


# ---------------------------------------------------------------------------------------------------------
# Config validation (infra/__init__.py): bad input fails before any resource is declared


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "GPU", "accelerator": "l4"}, "node pool name 'GPU' must match"),
        ({"name": "system", "accelerator": "l4"}, "reserved for the system pool"),
        ({"name": "g", "accelerator": "l5"}, "GPUs are"),
        ({"name": "g", "accelerator": "l4", "max_nodes": 0}, "max_nodes (0) must be >= 1"),
        ({"name": "g", "accelerator": "l4", "min_nodes": 3, "max_nodes": 2}, ">= min_nodes (3)"),
        ({"name": "g", "accelerator": "l4", "min_nodes": -1}, "min_nodes must be an integer >= 0"),
        ({"name": "t", "accelerator": "v5litepod-4x4", "max_nodes": 8}, "one 4-node slice; use max_nodes=4"),
        ({"name": "t", "accelerator": "v5litepod-4x4", "min_nodes": 2, "max_nodes": 4}, "min_nodes 0 or 4"),
        ({"name": "g", "accelerator": "l4:spot", "reservation": "r1"}, "spot VMs cannot consume reservation 'r1'"),
        ({"name": "g", "accelerator": "l4", "reservation": "Bad_Name"}, "reservation 'Bad_Name' must match"),
    ],
)
def test_bad_node_pool_specs_name_the_problem(kwargs, message):
    with pytest.raises(ValidationError) as info:
        NodePoolSpec(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("Acme", ZONE, CLUSTER), "project 'Acme' must match"),
        ((PROJECT, "us-central1", CLUSTER), "zone 'us-central1' must match"),
        ((PROJECT, ZONE, "my_cluster"), "cluster 'my_cluster' must match"),
        ((PROJECT, ZONE, CLUSTER, (NodePoolSpec("a", "l4"), NodePoolSpec("a", "t4"))), "repeated: a"),
        ((PROJECT, ZONE, CLUSTER, ("l4",)), "must hold NodePoolSpec values"),
    ],
)
def test_bad_infra_config_names_the_field(args, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        InfraConfig(*args)


def test_config_from_a_resolved_gke_profile():
    infra = resolve_infra(project=PROJECT, zone="asia-east1-c", cluster="prod", backend="gke")
    config = InfraConfig.from_infra(infra, (NodePoolSpec("l4", "l4"),))
    assert (config.project, config.region, config.cluster) == (PROJECT, "asia-east1", "prod")
    assert config.stack == f"{PROJECT}-prod"
    assert config.state_url == f"gs://{PROJECT}-kinetic-state" and config.repository_id == "kn-prod"
    with pytest.raises(ValidationError, match="backend 'local' has no cloud infrastructure"):
        InfraConfig.from_infra(resolve_infra())


def test_service_account_ids_fit_iam_limits():
    assert service_account_id("train", "node") == "kn-train-node"
    long_a = service_account_id("a-very-long-cluster-name-for-training", "build")
    long_b = service_account_id("a-very-long-cluster-name-for-inference", "build")
    assert len(long_a) <= 30 and len(long_b) <= 30 and long_a != long_b
    assert long_a.startswith("kn-a-very") and long_a.endswith("-build")
