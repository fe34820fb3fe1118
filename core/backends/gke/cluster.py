"""A GKE profile's cluster behind the `Backend` protocol: the kinetic Jobs (and LeaderWorkerSets) in its
namespace, their handles and results in its jobs bucket, and the desired node pools recorded for
(project, cluster) in the workspace's state.db. The API clients and the bucket are reached on first use,
so a console on an unreachable cluster still serves everything that is not a pool or a job.

Decisions the spec leaves open:
- `jobs` lists the kinetic Jobs the cluster still has (Kubernetes deletes a Job 600 s after it finished,
  and at cancel); `status`, `logs` and `result` still answer for any job whose handle.json is in the
  bucket. Workloads without a handle in this profile's bucket are left out. Multi-host (Pathways) jobs
  answer by id but are not listed.
- A job's `pool` is the desired node pool that provides its accelerator (None when none does, e.g. CPU
  jobs on the system pool); `started_at`/`finished_at` are unknown (None).
- A pool's `in_use` is the nodes of its RUNNING jobs and `queued` its PENDING jobs: one refresh per live
  job (a settled job's state is final, so it is remembered and never asked again).
- `pool add|remove` refuse: a node pool changes only with its Pulumi stack, which the CLI applies.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.artifacts import PREFIX as ARTIFACTS
from kinetic_tui.core.backends.base import (
    Call,
    DebugEndpoint,
    JobChanges,
    JobInfo,
    JobState,
    LogReader,
    Submitted,
    read_record,
)
from kinetic_tui.core.backends.gke import batches, serving
from kinetic_tui.core.backends.gke.backend import GkeBackend
from kinetic_tui.core.backends.gke.k8s_client import target
from kinetic_tui.core.backends.gke.manifests import TTL_AFTER_FINISHED
from kinetic_tui.core.backends.gke.pools import GkePools
from kinetic_tui.core.backends.gke.port_forward import port_forward
from kinetic_tui.core.backends.gke.submission import (
    WORKLOADS,
    submit_gke,
    workload_backend,
)
from kinetic_tui.core.backends.local.workspace import store
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.handle_records import submitted_at
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.profiles import ResolvedInfra
from kinetic_tui.core.submission.context import JobContext
from kinetic_tui.core.submission.pack import HANDLE

if TYPE_CHECKING:
    from kinetic_tui.core.serving.config import EndpointConfig
    from kinetic_tui.infra import NodePoolSpec


@dataclass(frozen=True)
class ClusterJob:
    """A GKE job as a JobRecord: its state from the cluster, the rest from its handle.json."""

    job_id: str
    pool: str | None
    status: JobStatus
    phase: str | None
    detail: str | None
    created_at: float
    handle: dict[str, Any]
    nodes: int = 1
    started_at: float | None = None  # the backend does not report when a pod started or ended
    finished_at: float | None = None


@dataclass(frozen=True)
class ClusterPool:
    """A desired node pool: it can grow to `nodes` (its autoscaling maximum), and its accelerators are real."""

    name: str
    accelerator: str
    nodes: int
    spot: bool
    in_use: int = 0
    queued: int = 0
    emulated: bool = False

    @classmethod
    def of(cls, spec: NodePoolSpec, in_use: int = 0, queued: int = 0) -> ClusterPool:
        return cls(spec.name, spec.accelerator, spec.max_nodes, spec.is_spot(), in_use, queued)


def provides(spec: NodePoolSpec, accelerator: str) -> bool:
    """A node pool runs a job when the accelerator shape and the pricing (spot or not) both match."""
    config = parse_accelerator(accelerator)
    return dataclasses.replace(config, spot=False) == spec.config and config.spot == spec.is_spot()


class GkeCluster:
    """One GKE profile's namespace and jobs bucket; each job is driven by its workload kind's backend."""

    kind = "gke"

    def __init__(self, infra: ResolvedInfra, bucket: str) -> None:
        self.infra = infra
        self.bucket = bucket
        self._settled: dict[str, JobState] = {}  # final states, never asked again

    @cached_property
    def _workloads(self) -> dict[str, GkeBackend]:
        return {kind: workload_backend(self.infra, kind, self.bucket) for kind in WORKLOADS}

    @property
    def desired(self) -> GkePools:
        return GkePools(store(), self.infra.project, self.infra.cluster)

    def _backend(self, job_id: str) -> GkeBackend:
        """The backend of the job's workload kind; NotFoundError when the bucket has no handle for it."""
        kind = self._workloads["gke"].handle(job_id).get("backend")
        return self._workloads[kind if kind in WORKLOADS else "gke"]

    # -- submission ---------------------------------------------------------------------------------------

    def submit_call(self, ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        return submit_gke(ctx, args, kwargs, backend=self._workloads[ctx.backend])

    def submit_map(self, contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]) -> Submitted:
        return batches.submit_map(self._workloads["gke"], contexts, calls, manifest)

    def attach_batch(self, group_id: str) -> Submitted | None:
        return batches.attach_batch(self._workloads["gke"], group_id)

    # -- one job --------------------------------------------------------------------------------------------

    def find_record(self, job_id: str) -> tuple[str, dict[str, Any]] | None:
        storage = self._workloads["gke"].storage
        try:
            return read_record(storage.uri(f"{job_id}/{HANDLE}"), storage.get_bytes(f"{job_id}/{HANDLE}"))
        except NotFoundError:
            return None

    def lookup_error(self, job_id: str) -> str:
        return f"unknown job {job_id!r}: not in this workspace nor in {self._workloads['gke'].storage.uri('')}"

    def record(self, job_id: str) -> dict[str, Any]:
        return self._workloads["gke"].handle(job_id)  # every kind shares the bucket; read once, cached

    def refresh(self, job_id: str) -> ClusterJob:
        return self._record(job_id, self._state(job_id), self.desired.list())

    def finished_among(self, job_ids: Sequence[str]) -> dict[str, ClusterJob | None]:
        """Each job read on its own (a settled one from memory), the pools listed once."""
        specs = self.desired.list()
        found: dict[str, ClusterJob | None] = {}
        for job_id in job_ids:
            try:
                job = self._record(job_id, self._state(job_id), specs)
            except NotFoundError:
                found[job_id] = None
                continue
            if job.status.finished:
                found[job_id] = job
        return found

    def wait(self, job_id: str, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> ClusterJob:
        state = self._remember(self._backend(job_id).wait(job_id, timeout, on_poll))
        return self._record(job_id, state, self.desired.list())

    def read_logs(
        self, job_id: str, follow: bool = False, stop: threading.Event | None = None, keep: int | None = None
    ) -> Iterator[list[str]]:
        return self._backend(job_id).read_logs(job_id, follow=follow, stop=stop, keep=keep)

    def log_reader(self, job_id: str) -> LogReader:
        return self._backend(job_id).log_reader(job_id)

    def tail_logs(self, job_id: str, n: int) -> list[str]:
        return self._backend(job_id).tail_logs(job_id, n)

    def bucket_uri(self, bucket: str, key: str) -> str:
        return self._workloads["gke"].storage.uri(key)  # a GKE profile's jobs use its own bucket

    def exit_code(self, job_id: str) -> int | None:
        return self._backend(job_id).exit_code(job_id)

    def result_bytes(self, info: JobInfo) -> bytes | None:
        return None  # every result is under its job's prefix

    def cancel(self, job_id: str) -> ClusterJob:
        state = self._remember(self._backend(job_id).cancel(job_id))
        return self._record(job_id, state, self.desired.list())

    def cleanup(self, job_id: str, workload: bool = True, uploads: bool = True) -> None:
        self._backend(job_id).cleanup(job_id, workload, uploads)

    def leftover(self, job_id: str, files: bool) -> str | None:
        return self._backend(job_id).leftover(job_id)

    def debug_endpoint(self, job_id: str, host: str, port: int, local_port: int) -> DebugEndpoint:
        """A `kubectl port-forward` from `local_port` here to the job's leader pod."""
        pod = self._backend(job_id).leader_pod(job_id)
        if pod is None:
            raise NotFoundError(f"job {job_id} has no pod to forward to: it has not started or is gone")
        return port_forward(self.infra, pod, port, local_port)

    # -- endpoints ------------------------------------------------------------------------------------------

    def cluster_endpoints(self) -> GkeCluster:
        """The cluster serves endpoints itself: a Deployment, a Service and an HPA each."""
        return self

    def target(self) -> dict[str, Any]:
        infra = self.infra
        return {
            "backend": self.kind,
            "project": infra.project,
            "zone": infra.zone,
            "cluster": infra.cluster,
            "namespace": infra.namespace,
            "bucket": self.bucket,
        }

    def describe_target(self) -> str:
        return f"GKE cluster {self.infra.cluster!r} (namespace {self.infra.namespace!r})"

    def deploy_endpoint(self, config: EndpointConfig, routes: Mapping[str, Any]) -> dict[str, str]:
        """Create or replace the endpoint's Deployment (the serving image, the jobs bucket's artifact store,
        the versions it answers for), Service and autoscaler; their names. Bad config raises before the
        serving image is looked up or built and before any object is written."""
        from kinetic_tui.infra.serving_image import ensure_serving_image

        serving.check_config(config)
        infra = self.infra
        objects = serving.endpoint_manifests(
            config,
            routes,
            namespace=infra.namespace,
            image=ensure_serving_image(infra.project, infra.region, infra.cluster).tag,
            artifacts_uri=self.bucket_uri(self.bucket, ARTIFACTS),
        )
        return serving.deploy(self._workloads["gke"].clients, objects)

    def remove_endpoint(self, name: str) -> None:
        """Delete the endpoint's autoscaler, Service and Deployment; NotFoundError when it has none here."""
        serving.remove(self._workloads["gke"].clients, name, self.infra.namespace)

    def endpoint_status(self, name: str) -> dict[str, Any]:
        return serving.status(self._workloads["gke"].clients, name, self.infra.namespace)

    # -- listings and pools ---------------------------------------------------------------------------------

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> list[ClusterJob]:
        listed = [job for job in self._listed(self.desired.list()) if status is None or job.status is status]
        return listed if limit is None else listed[:limit]

    def job_changes(self, cursor: object = None) -> JobChanges:
        """The cluster's list is the answer each time (the API server keeps no history beyond its TTL)."""
        return JobChanges(self.jobs(), complete=True)

    def prune(self, before: float) -> tuple[int, int]:
        raise ValidationError(
            "jobs prune removes a local workspace's history; a GKE cluster deletes finished Jobs itself "
            f"(ttlSecondsAfterFinished: {TTL_AFTER_FINISHED} s)"
        )

    def pools(self) -> list[ClusterPool]:
        specs = self.desired.list()
        in_use: Counter[str] = Counter()
        queued: Counter[str] = Counter()
        for job in self._listed(specs):
            if job.pool is not None and job.status is JobStatus.RUNNING:
                in_use[job.pool] += job.nodes
            elif job.pool is not None and job.status is JobStatus.PENDING:
                queued[job.pool] += 1
        return [ClusterPool.of(spec, in_use[spec.name], queued[spec.name]) for spec in specs]

    def pool(self, name: str) -> ClusterPool:
        return ClusterPool.of(self.desired.get(name))

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> ClusterPool:
        raise self._stack_only(
            f"pool add {name} --accelerator {accelerator} --nodes {nodes}" + (" --spot" if spot else "")
        )

    def remove_pool(self, name: str) -> ClusterPool:
        raise self._stack_only(f"pool remove {name}")

    def placement(self, accelerator: str, num_nodes: int) -> str | None:
        return next((spec.name for spec in self.desired.list() if provides(spec, accelerator)), None)

    def _stack_only(self, command: str) -> ValidationError:
        return ValidationError(
            f"node pools of GKE cluster {self.infra.cluster!r} change with its Pulumi stack, "
            f"not from the console: run `kinetic-tui {command}` (it applies the stack)"
        )

    def _listed(self, specs: tuple[NodePoolSpec, ...]) -> list[ClusterJob]:
        """Every kinetic Job in the namespace that has a handle in the bucket, newest first (by the
        handle's created_at: the Jobs' creationTimestamps only have whole seconds)."""
        jobs = []
        for job_id in self._workloads["gke"].job_ids():
            try:
                jobs.append(self._record(job_id, self._state(job_id), specs))
            except NotFoundError:  # a workload this profile's bucket knows nothing about
                continue
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    def _state(self, job_id: str) -> JobState:
        if job_id in self._settled:
            return self._settled[job_id]
        return self._remember(self._backend(job_id).refresh(job_id))

    def _remember(self, state: JobState) -> JobState:
        if state.status.finished:
            self._settled[state.job_id] = state
        return state

    def _record(self, job_id: str, state: JobState, specs: tuple[NodePoolSpec, ...]) -> ClusterJob:
        handle = self.record(job_id)
        pool = next((spec.name for spec in specs if provides(spec, handle["accelerator"])), None)
        return ClusterJob(
            job_id, pool, state.status, state.phase, state.detail, submitted_at(handle), handle, state.nodes
        )


_clusters: dict[tuple[str, ...], GkeCluster] = {}
_clusters_lock = threading.Lock()


def cluster_backend(infra: Callable[[], ResolvedInfra], bucket: str) -> GkeCluster:
    """The registry's factory: one cached GkeCluster per API server, cluster, namespace and bucket."""
    resolved = infra()
    key = (target(resolved), resolved.project, resolved.zone, resolved.cluster, resolved.namespace, bucket)
    with _clusters_lock:
        if key not in _clusters:
            _clusters[key] = GkeCluster(resolved, bucket)
        return _clusters[key]
