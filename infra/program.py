"""The Pulumi program for one kinetic GKE cluster.

`define(config)` declares every resource and returns the stack outputs; `stack_program(config)` wraps it
as the inline program that `kinetic_tui.infra.state` hands to the Automation API. Only
`kinetic_tui.infra.state` and tests import this module, so pulumi and pulumi_gcp load at the top here and
nowhere else.

Choices made here:
- One explicit `gcp` provider pinned to the config's project/region/zone: the program never depends on
  ambient stack config or gcloud defaults, so the same config always means the same project.
- Zonal cluster in the profile's zone; accelerator pools are pinned to that zone (TPU/GPU capacity is zonal).
- Private nodes with a public control-plane endpoint, so `kubectl` and the client work from a laptop
  while nodes have no external IPs; egress (pip, image pulls from outside Google) goes through Cloud NAT.
- No Workload Identity: pods act as the node service account, which holds only what jobs need (object
  admin on the jobs bucket, read on the image repository, logging/monitoring writers).
- Builds bucket objects (Cloud Build sources and logs) are deleted after BUILD_RETENTION_DAYS; images live
  in Artifact Registry, so nothing durable is lost. The jobs bucket only aborts multipart uploads left
  incomplete for a day: its objects (results, data cache + markers) must not expire behind a handle.
- Accelerator pools scale from `min_nodes`; GPU pools get drivers installed by GKE (`LATEST`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi
import pulumi_gcp as gcp

from kinetic_tui.core.accelerators import GpuConfig, TpuConfig, category, is_multi_host
from kinetic_tui.infra import SYSTEM_POOL, InfraConfig, NodePoolSpec, service_account_id

REQUIRED_APIS = ("container", "artifactregistry", "cloudbuild", "storage", "iam", "compute")
BUILD_RETENTION_DAYS = 7
SYSTEM_MACHINE_TYPE = "e2-standard-4"
CPU_POOL_MACHINE_TYPE = "e2-standard-8"  # `cpu` accelerator pools: the registry has no CPU machine type
SUBNET_CIDR = "10.0.0.0/20"
PODS_CIDR = "10.16.0.0/14"
SERVICES_CIDR = "10.20.0.0/20"
MASTER_CIDR = "172.16.0.0/28"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
NODE_PROJECT_ROLES = (
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
)
# Taints keep ordinary pods off expensive nodes; the GKE backend's manifests tolerate exactly these.
GPU_TAINT = ("nvidia.com/gpu", "present")
TPU_TAINT = ("google.com/tpu", "present")
SPOT_TAINT = ("cloud.google.com/gke-spot", "true")


def define(config: InfraConfig) -> dict[str, pulumi.Output[Any]]:
    """Declare the cluster's resources; returns the stack outputs by name."""
    provider = gcp.Provider("gcp", project=config.project, region=config.region, zone=config.zone)
    apis = [
        gcp.projects.Service(
            f"api-{api}",
            service=f"{api}.googleapis.com",
            disable_on_destroy=False,
            opts=pulumi.ResourceOptions(provider=provider),
        )
        for api in REQUIRED_APIS
    ]
    opts = pulumi.ResourceOptions(provider=provider, depends_on=apis)

    repo = gcp.artifactregistry.Repository(
        "repository",
        repository_id=config.repository_id,
        location=config.region,
        format="DOCKER",
        description=f"kinetic images for cluster {config.cluster}",
        opts=opts,
    )
    jobs_bucket = _bucket("jobs-bucket", config.jobs_bucket, config, _abort_incomplete_uploads(), opts)
    builds_bucket = _bucket("builds-bucket", config.builds_bucket, config, _expire_after(BUILD_RETENTION_DAYS), opts)
    node_sa = _service_account("node", config, opts)
    build_sa = _service_account("build", config, opts)
    _grant_access(config, node_sa, build_sa, repo, jobs_bucket, builds_bucket, opts)

    cluster = _cluster(config, node_sa, opts)
    pools = [_system_pool(config, cluster, node_sa, opts)]
    pools += [_accelerator_pool(config, spec, cluster, node_sa, opts) for spec in config.node_pools]

    return {
        "cluster_name": cluster.name,
        "cluster_endpoint": cluster.endpoint,
        "cluster_location": cluster.location,
        "jobs_bucket": jobs_bucket.name,
        "builds_bucket": builds_bucket.name,
        "repository_url": pulumi.Output.concat(
            repo.location, "-docker.pkg.dev/", config.project, "/", repo.repository_id
        ),
        "node_service_account": node_sa.email,
        "build_service_account": build_sa.email,
        "node_pools": pulumi.Output.all(*[pool.name for pool in pools]),
    }


def stack_program(config: InfraConfig) -> Callable[[], None]:
    """The inline program for the Automation API: define everything and export the outputs."""

    def program() -> None:
        for name, value in define(config).items():
            pulumi.export(name, value)

    return program


# ---------------------------------------------------------------------------------------------------------
# Storage, identity and access


def _bucket(
    logical: str,
    name: str,
    config: InfraConfig,
    rule: gcp.storage.BucketLifecycleRuleArgs,
    opts: pulumi.ResourceOptions,
) -> gcp.storage.Bucket:
    return gcp.storage.Bucket(
        logical,
        name=name,
        location=config.region,
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        force_destroy=True,
        lifecycle_rules=[rule],
        opts=opts,
    )


def _expire_after(days: int) -> gcp.storage.BucketLifecycleRuleArgs:
    return gcp.storage.BucketLifecycleRuleArgs(
        action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
        condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=days),
    )


def _abort_incomplete_uploads() -> gcp.storage.BucketLifecycleRuleArgs:
    return gcp.storage.BucketLifecycleRuleArgs(
        action=gcp.storage.BucketLifecycleRuleActionArgs(type="AbortIncompleteMultipartUpload"),
        condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=1),
    )


def _service_account(role: str, config: InfraConfig, opts: pulumi.ResourceOptions) -> gcp.serviceaccount.Account:
    return gcp.serviceaccount.Account(
        f"{role}-sa",
        account_id=service_account_id(config.cluster, role),
        display_name=f"kinetic {config.cluster} {role}s",
        opts=opts,
    )


def _grant_access(
    config: InfraConfig,
    node_sa: gcp.serviceaccount.Account,
    build_sa: gcp.serviceaccount.Account,
    repo: gcp.artifactregistry.Repository,
    jobs_bucket: gcp.storage.Bucket,
    builds_bucket: gcp.storage.Bucket,
    opts: pulumi.ResourceOptions,
) -> None:
    """Least privilege: bucket- and repository-scoped grants wherever GCP allows them."""
    for role in NODE_PROJECT_ROLES:
        gcp.projects.IAMMember(
            f"node-{role.split('/')[1]}", project=config.project, role=role, member=node_sa.member, opts=opts
        )
    gcp.projects.IAMMember(
        "build-logWriter",
        project=config.project,
        role="roles/logging.logWriter",
        member=build_sa.member,
        opts=opts,
    )
    for logical, role, member in (
        ("node-repo-reader", "roles/artifactregistry.reader", node_sa.member),
        ("build-repo-writer", "roles/artifactregistry.writer", build_sa.member),
    ):
        gcp.artifactregistry.RepositoryIamMember(
            logical, repository=repo.name, location=repo.location, role=role, member=member, opts=opts
        )
    for logical, bucket, role, member in (
        ("node-jobs-bucket", jobs_bucket, "roles/storage.objectAdmin", node_sa.member),
        ("build-builds-bucket", builds_bucket, "roles/storage.objectAdmin", build_sa.member),
    ):
        gcp.storage.BucketIAMMember(logical, bucket=bucket.name, role=role, member=member, opts=opts)


# ---------------------------------------------------------------------------------------------------------
# Network and cluster


def _cluster(
    config: InfraConfig, node_sa: gcp.serviceaccount.Account, opts: pulumi.ResourceOptions
) -> gcp.container.Cluster:
    network = gcp.compute.Network("network", name=f"kn-{config.cluster}", auto_create_subnetworks=False, opts=opts)
    subnet = gcp.compute.Subnetwork(
        "subnetwork",
        name=f"kn-{config.cluster}",
        region=config.region,
        network=network.id,
        ip_cidr_range=SUBNET_CIDR,
        private_ip_google_access=True,
        secondary_ip_ranges=[
            gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="pods", ip_cidr_range=PODS_CIDR),
            gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name="services", ip_cidr_range=SERVICES_CIDR),
        ],
        opts=opts,
    )
    router = gcp.compute.Router(
        "router", name=f"kn-{config.cluster}", region=config.region, network=network.id, opts=opts
    )
    gcp.compute.RouterNat(
        "nat",
        name=f"kn-{config.cluster}",
        router=router.name,
        region=config.region,
        nat_ip_allocate_option="AUTO_ONLY",
        source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
        opts=opts,
    )
    return gcp.container.Cluster(
        "cluster",
        name=config.cluster,
        location=config.zone,
        network=network.id,
        subnetwork=subnet.id,
        remove_default_node_pool=True,
        initial_node_count=1,
        deletion_protection=False,
        node_config=gcp.container.ClusterNodeConfigArgs(
            service_account=node_sa.email, oauth_scopes=[CLOUD_PLATFORM_SCOPE]
        ),
        private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
            enable_private_nodes=True, enable_private_endpoint=False, master_ipv4_cidr_block=MASTER_CIDR
        ),
        ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
            cluster_secondary_range_name="pods", services_secondary_range_name="services"
        ),
        release_channel=gcp.container.ClusterReleaseChannelArgs(channel="REGULAR"),
        opts=opts,
    )


def _node_pool(
    logical: str,
    name: str,
    config: InfraConfig,
    cluster: gcp.container.Cluster,
    min_nodes: int,
    max_nodes: int,
    node_config: gcp.container.NodePoolNodeConfigArgs,
    opts: pulumi.ResourceOptions,
    placement: gcp.container.NodePoolPlacementPolicyArgs | None = None,
) -> gcp.container.NodePool:
    return gcp.container.NodePool(
        logical,
        name=name,
        cluster=cluster.name,
        location=config.zone,
        node_locations=[config.zone],
        initial_node_count=min_nodes,
        autoscaling=gcp.container.NodePoolAutoscalingArgs(min_node_count=min_nodes, max_node_count=max_nodes),
        management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
        node_config=node_config,
        placement_policy=placement,
        opts=opts,
    )


def _system_pool(
    config: InfraConfig,
    cluster: gcp.container.Cluster,
    node_sa: gcp.serviceaccount.Account,
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    node_config = gcp.container.NodePoolNodeConfigArgs(
        machine_type=SYSTEM_MACHINE_TYPE,
        service_account=node_sa.email,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        labels={"kinetic/pool": SYSTEM_POOL},
    )
    return _node_pool("pool-system", SYSTEM_POOL, config, cluster, 1, 3, node_config, opts)


def _accelerator_pool(
    config: InfraConfig,
    spec: NodePoolSpec,
    cluster: gcp.container.Cluster,
    node_sa: gcp.serviceaccount.Account,
    opts: pulumi.ResourceOptions,
) -> gcp.container.NodePool:
    accelerator = spec.config
    spot = spec.is_spot()
    taints = [_taint(*GPU_TAINT)] if isinstance(accelerator, GpuConfig) else []
    taints += [_taint(*TPU_TAINT)] if isinstance(accelerator, TpuConfig) else []
    taints += [_taint(*SPOT_TAINT)] if spot else []
    node_config = gcp.container.NodePoolNodeConfigArgs(
        machine_type=getattr(accelerator, "machine_type", CPU_POOL_MACHINE_TYPE),
        spot=spot,
        service_account=node_sa.email,
        oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        labels={"kinetic/pool": spec.name, "kinetic/category": category(accelerator)},
        taints=taints,
        guest_accelerators=_guest_accelerators(accelerator),
        reservation_affinity=_reservation(spec.reservation),
    )
    placement = None
    if isinstance(accelerator, TpuConfig) and is_multi_host(accelerator):
        placement = gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT", tpu_topology=accelerator.topology)
    return _node_pool(
        f"pool-{spec.name}",
        spec.name,
        config,
        cluster,
        spec.min_nodes,
        spec.max_nodes,
        node_config,
        opts,
        placement,
    )


def _taint(key: str, value: str) -> gcp.container.NodePoolNodeConfigTaintArgs:
    return gcp.container.NodePoolNodeConfigTaintArgs(key=key, value=value, effect="NO_SCHEDULE")


def _guest_accelerators(accelerator: object) -> list[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs] | None:
    if not isinstance(accelerator, GpuConfig):
        return None  # TPU machine types carry their chips; CPU pools have none
    drivers = gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
        gpu_driver_version="LATEST"
    )
    return [
        gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
            type=accelerator.gke_label, count=accelerator.count, gpu_driver_installation_config=drivers
        )
    ]


def _reservation(name: str | None) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs | None:
    if name is None:
        return None
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION",
        key="compute.googleapis.com/reservation-name",
        values=[name],
    )
