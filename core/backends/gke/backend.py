"""The GKE backend: one batch/v1 Job per call, status from the Job and its pods, logs from the
pod log stream, results in the jobs bucket.

A job's truth lives in two places that outlive each other: the Kubernetes Job (gone 600 s after it
finishes, or at cancel) and the job's prefix in the bucket (handle, result summaries). Status reads, in
order: `outcome.json` (written by a client that settled the job itself: a cancel, or a launch that can
never succeed), then the live workload and its pods, then the result files. So a job is never reported
Pending for ever: a pod that cannot pull its image, has no node pool for its accelerator, or stays
unschedulable past `pending_timeout`, is settled FAILED with the reason and its workload deleted.

Responses are read raw (`_preload_content=False` + json) rather than through the SDK's models: status
polls only need a few fields, and skipping model construction keeps a poll cheap.

One backend drives one workload kind (Pathways subclasses it for LeaderWorkerSets); `GkeCluster`
(cluster.py) serves a whole GKE profile behind the `Backend` protocol and picks the workload backend per job.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinetic_tui.core.accelerators import AcceleratorConfig, format_accelerator, parse_accelerator
from kinetic_tui.core.backends.base import JobState
from kinetic_tui.core.backends.gke import manifests, pod_logs
from kinetic_tui.core.backends.gke.k8s_client import K8sClients, api_error, api_reason
from kinetic_tui.core.backends.gke.pod_logs import PodLogReader
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.storage import Storage
from kinetic_tui.core.submission.pack import HANDLE

OUTCOME = "outcome.json"
PENDING_TIMEOUT = 900.0
LIST_PAGE = 500  # objects per list request (the API server pages big lists with limit/continue)
POD_IDS_PER_LIST = 50  # job ids per set-based pod selector (a batch poll lists its live inputs' pods)
LIST_RESTARTS = 3  # a list whose continue token expires (410 Gone) is started again at most this often
SUSPENDED = "suspended: waiting for room in its batch (max_concurrent)"
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
NO_POOL_HINT = "node affinity/selector"  # the autoscaler's words when no node pool matches the selector
KEEP_ON_CLEANUP = (HANDLE, OUTCOME, "result", "output/")  # records a finished job is still asked about


class GkeError(KineticError):
    """The Kubernetes API refused a request; the message names the object and the API's reason."""


@dataclass(frozen=True)
class Diagnosis:
    """Why a pod is not running; `fatal` ones settle the job FAILED instead of leaving it Pending."""

    detail: str
    fatal: bool


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def diagnose(
    pods: Sequence[Mapping[str, Any]],
    events: Callable[[str], Sequence[Mapping[str, Any]]],
    accelerator: str,
    now: float,
    pending_timeout: float,
) -> Diagnosis | None:
    """The first reason a pending pod will not (or did not yet) start; `events(pod_name)` is asked only for
    unschedulable pods, to tell "no node pool matches" from "the pool is still scaling up"."""
    for pod in pods:
        status = pod.get("status") or {}
        for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in IMAGE_PULL_REASONS:
                return Diagnosis(
                    f"image {container.get('image')!r} cannot be pulled ({waiting['reason']}): "
                    f"{waiting.get('message') or 'no message'}",
                    fatal=True,
                )
        for condition in status.get("conditions") or []:
            if condition.get("type") != "PodScheduled" or condition.get("reason") != "Unschedulable":
                continue
            message = condition.get("message") or "no message"
            for event in events(pod["metadata"]["name"]):
                if event.get("reason") == "NotTriggerScaleUp" and NO_POOL_HINT in (event.get("message") or ""):
                    return Diagnosis(
                        f"no node pool provides {accelerator} ({event['message']}); add one: "
                        f"kinetic-tui pool add NAME --accelerator {accelerator}",
                        fatal=True,
                    )
            since = _parse_time(condition.get("lastTransitionTime"))
            waited = now - since if since is not None else 0.0
            if waited > pending_timeout:
                return Diagnosis(f"unschedulable for {waited:.0f}s: {message}", fatal=True)
            return Diagnosis(f"unschedulable: {message}", fatal=False)
    return None


def container_exit_code(pod: Mapping[str, Any]) -> int | None:
    """The kinetic container's exit code once it terminated (this run or the last), else None."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") != manifests.CONTAINER:
            continue
        for key in ("state", "lastState"):
            terminated = (container.get(key) or {}).get("terminated")
            if terminated is not None:
                return int(terminated.get("exitCode", 1))
    return None


def _summary(storage: Storage, job_id: str, name: str) -> dict[str, Any] | None:
    try:
        summary: dict[str, Any] = json.loads(storage.get_bytes(f"{job_id}/{name}"))
    except NotFoundError:
        return None
    return summary


def _failure_text(summary: Mapping[str, Any]) -> str:
    return f"{summary.get('error_type')}: {summary.get('error')}"


class GkeBackend:
    """Jobs as batch/v1 Jobs in one namespace of one cluster; artifacts in one jobs bucket."""

    kind = "gke"
    multi_host = False  # a Job runs one host; multi-host slices need a LeaderWorkerSet (Pathways)

    def __init__(
        self,
        clients: K8sClients,
        storage: Storage,
        namespace: str,
        service_account: str = "default",
        pending_timeout: float = PENDING_TIMEOUT,
    ) -> None:
        self.clients = clients
        self.storage = storage
        self.namespace = namespace
        self.service_account = service_account
        self.pending_timeout = pending_timeout
        self._handles: dict[str, dict[str, Any]] = {}

    # -- the workload kind (PathwaysBackend overrides these) ----------------------------------------

    def manifest(self, spec: manifests.WorkloadSpec) -> dict[str, Any]:
        return manifests.job_manifest(spec)

    def _create(self, manifest: dict[str, Any]) -> None:
        self.clients.batch.create_namespaced_job(self.namespace, manifest, _preload_content=False)

    def _read(self, job_id: str) -> dict[str, Any] | None:
        return self._get(self.clients.batch.read_namespaced_job, job_id, self.namespace)

    def _list(self) -> list[dict[str, Any]]:
        return self._items(
            self.clients.batch.list_namespaced_job, self.namespace, label_selector=manifests.ALL_JOBS_SELECTOR
        )

    def _delete(self, job_id: str, propagation: str) -> None:
        self._get(self.clients.batch.delete_namespaced_job, job_id, self.namespace, propagation_policy=propagation)

    def _verdict(self, job_id: str, workload: Mapping[str, Any], pods: list[dict[str, Any]]) -> JobState | None:
        """The finished state from the Job's conditions, or None while it runs."""
        conditions = {
            c.get("type"): c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        }
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            return self._from_results(job_id) or JobState(
                job_id, JobStatus.FAILED, "lost", "the job exited without writing its result", self._nodes(job_id)
            )
        failed = conditions.get("Failed") or conditions.get("FailureTarget")
        if failed is None:
            return None
        return self._from_results(job_id) or JobState(
            job_id,
            JobStatus.FAILED,
            "runner",
            f"{failed.get('reason') or 'Failed'}: {failed.get('message') or 'the pod failed'}",
            self._nodes(job_id),
        )

    # -- submission -----------------------------------------------------------------------------------

    def submit(
        self, record: Mapping[str, Any], runner_args: Sequence[str], image: str, suspend: bool = False
    ) -> JobState:
        """Create the workload for a job whose artifacts and handle.json are already in the bucket;
        `suspend` creates it suspended (a batch input waiting for room, see `release`)."""
        spec = manifests.WorkloadSpec(
            job_id=record["job_id"],
            namespace=self.namespace,
            image=image,
            accelerator=_accelerator(record),
            runner_args=tuple(runner_args),
            output_dir=record["output_dir"],
            service_account=self.service_account,
            display_name=record.get("display_name") or "",
            group_id=record.get("group_id"),
            suspend=suspend,
            fuse_mounts=tuple((directory, mount) for directory, mount in record.get("fuse_mounts") or ()),
        )
        self._handles[spec.job_id] = dict(record)
        try:
            self._create(self.manifest(spec))
        except api_error() as exc:
            raise GkeError(
                f"could not create {self.kind} workload {spec.job_id} in namespace {self.namespace!r}: "
                f"{api_reason(exc)}"
            ) from None
        return JobState(spec.job_id, JobStatus.PENDING, nodes=spec.num_nodes)

    # -- state ------------------------------------------------------------------------------------------

    def refresh(self, job_id: str) -> JobState:
        """The job's current state; settles it FAILED when a pending pod can never start."""
        stored = self._stored(job_id)
        if stored is not None:
            return stored
        workload = self._read(job_id)
        if workload is None:
            return self._gone(job_id)
        if (workload.get("spec") or {}).get("suspend"):
            return JobState(job_id, JobStatus.PENDING, None, SUSPENDED, self._nodes(job_id))
        return self._judge(job_id, workload, self._pods(job_id))

    def batch_states(self, group_id: str, job_ids: Sequence[str]) -> dict[str, JobState]:
        """The states of a batch's inputs `job_ids`, as `refresh` tells them, from one labelled list of the
        batch's Jobs and one list of the live inputs' pods (POD_IDS_PER_LIST ids per request) instead of
        reads per input: a poll's API calls grow with the pages of the batch, not with its inputs. A
        suspended input is only named (no handle is read for it)."""
        selector = f"{manifests.GROUP_LABEL}={group_id}"
        items = self._items(self.clients.batch.list_namespaced_job, self.namespace, label_selector=selector)
        listed = {item["metadata"]["name"]: item for item in items}
        states: dict[str, JobState] = {}
        live = []
        for job_id in job_ids:
            workload = listed.get(job_id)
            if workload is not None and (workload.get("spec") or {}).get("suspend"):
                states[job_id] = JobState(job_id, JobStatus.PENDING, None, SUSPENDED)
            elif (stored := self._stored(job_id)) is not None:
                states[job_id] = stored
            elif workload is None:
                states[job_id] = self._gone(job_id)
            else:
                live.append(job_id)
        pods = self._pods_of(live)
        for job_id in live:
            states[job_id] = self._judge(job_id, listed[job_id], pods.get(job_id, []))
        return states

    def _stored(self, job_id: str) -> JobState | None:
        """The outcome a client recorded when it settled the job itself (a cancel, a launch that failed)."""
        stored = _summary(self.storage, job_id, OUTCOME)
        if stored is None:
            return None
        return JobState(
            job_id, JobStatus(stored["status"]), stored.get("phase"), stored.get("detail"), self._nodes(job_id)
        )

    def _gone(self, job_id: str) -> JobState:
        return self._from_results(job_id) or JobState(
            job_id, JobStatus.FAILED, "lost", "the workload is gone and left no result", self._nodes(job_id)
        )

    def _judge(self, job_id: str, workload: Mapping[str, Any], pods: list[dict[str, Any]]) -> JobState:
        """The state of a job whose workload exists and runs (not suspended), from it and its pods."""
        verdict = self._verdict(job_id, workload, pods)
        if verdict is not None:
            return verdict
        found = diagnose(pods, self._events, self._accelerator_text(job_id), time.time(), self.pending_timeout)
        if found is not None and found.fatal:  # checked first: one host that never starts sinks a running slice
            return self._settle(job_id, JobStatus.FAILED, "launch", found.detail)
        if any((pod.get("status") or {}).get("phase") == "Running" for pod in pods):
            return JobState(job_id, JobStatus.RUNNING, nodes=self._nodes(job_id))
        return JobState(
            job_id, JobStatus.PENDING, None, found.detail if found else "waiting for a node", self._nodes(job_id)
        )

    def wait(self, job_id: str, timeout: float | None = None, on_poll: Callable[[], None] | None = None) -> JobState:
        """Block until the job settles; TimeoutError (the job keeps running) after `timeout` seconds.
        `on_poll` runs before every poll (the decorator echoes new log lines from there)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.02
        while True:
            if on_poll is not None:
                on_poll()
            state = self.refresh(job_id)
            if state.status.finished:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {state.status.value} after {timeout} s; it keeps running")
            time.sleep(delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0.0)))
            delay = min(delay * 2, 1.0)

    def release(self, job_id: str) -> None:
        """Let a suspended Job start its pod (Kubernetes' `spec.suspend`, batch/v1)."""
        try:
            self.clients.batch.patch_namespaced_job(
                job_id, self.namespace, {"spec": {"suspend": False}}, _preload_content=False
            )
        except api_error() as exc:
            raise GkeError(
                f"could not release job {job_id} in namespace {self.namespace!r}: {api_reason(exc)}"
            ) from None

    def job_ids(self) -> list[str]:
        """Every kinetic workload in the namespace (label app=kinetic), newest first."""
        items = sorted(self._list(), key=lambda o: o["metadata"].get("creationTimestamp") or "", reverse=True)
        return [item["metadata"]["name"] for item in items]

    def exit_code(self, job_id: str) -> int | None:
        """Host 0's container exit code while its pod is still there (None before it ends, or once gone)."""
        pods = self._pods(job_id)
        return container_exit_code(pods[0]) if pods else None

    # -- actions ----------------------------------------------------------------------------------------

    def cancel(self, job_id: str) -> JobState:
        """Settle CANCELLED and delete the workload, its pods first (a finished job is left as it is)."""
        state = self.refresh(job_id)
        if state.status.finished:
            return state
        return self._settle(job_id, JobStatus.CANCELLED, None, "cancelled", propagation="Foreground")

    def cleanup(self, job_id: str, workload: bool = True, uploads: bool = True) -> None:
        """Delete the `workload` and the job's prefix in the bucket (`uploads`), keeping the records a finished
        job is still asked about (handle, result summaries, outcome, outputs). Refused while the job may
        still run."""
        state = self.refresh(job_id)
        if not state.status.finished:
            raise ValidationError(f"job {job_id} is {state.status.value}; cancel it or wait before cleanup")
        if workload:
            self._delete(job_id, "Background")
        for key in self.storage.list(f"{job_id}/") if uploads else ():
            if not key[len(job_id) + 1 :].startswith(KEEP_ON_CLEANUP):
                self.storage.delete_prefix(key)

    def leftover(self, job_id: str) -> str | None:
        """The job's workload object while the API server still has it: a deletion marks it and the
        garbage collector removes it once its pods (and any finalizers) are gone."""
        workload = self._read(job_id)
        if workload is None:
            return None
        since = (workload.get("metadata") or {}).get("deletionTimestamp")
        kind = workload.get("kind") or "workload"
        return f"{kind} {job_id}" + (f" (being deleted since {since})" if since else "")

    # -- logs -------------------------------------------------------------------------------------------

    def read_logs(
        self,
        job_id: str,
        follow: bool = False,
        stop: threading.Event | None = None,
        keep: int | None = None,
        poll: float = 0.1,
    ) -> Iterator[list[str]]:
        """Batches of log lines from the pods' log streams; with `follow`, waits for the pods to start and
        streams until they end (or `stop` is set). Multi-host lines are prefixed with their host. `keep` is
        not used: a pod's log is a stream read from its start, so every line arrives."""
        stop = stop or threading.Event()
        while follow and not stop.is_set() and self.refresh(job_id).status is JobStatus.PENDING:
            stop.wait(poll)
        pods = self._pods(job_id)
        if not pods or stop.is_set():
            return
        yield from pod_logs.stream(self.clients, self.namespace, pods, follow, stop)

    def log_reader(self, job_id: str) -> PodLogReader:
        return PodLogReader(lambda stop: self.read_logs(job_id, follow=True, stop=stop))

    def tail_logs(self, job_id: str, n: int) -> list[str]:
        return pod_logs.tail(self.clients, self.namespace, self._pods(job_id) if n > 0 else [], n)

    # -- helpers ----------------------------------------------------------------------------------------

    def _settle(
        self, job_id: str, status: JobStatus, phase: str | None, detail: str | None, propagation: str = "Background"
    ) -> JobState:
        """Record the outcome durably first, then remove the workload: a crash in between still reads right."""
        self.storage.put_bytes(
            f"{job_id}/{OUTCOME}", json.dumps({"status": status.value, "phase": phase, "detail": detail}).encode()
        )
        self._delete(job_id, propagation)
        return JobState(job_id, status, phase, detail, self._nodes(job_id))

    def _from_results(self, job_id: str) -> JobState | None:
        """The state the result summaries tell: a worker's failure wins over the leader's success."""
        nodes = self._nodes(job_id)
        for host in range(1, nodes):
            worker = _summary(self.storage, job_id, f"result-worker-{host}.json")
            if worker is not None and not worker["success"]:
                return JobState(
                    job_id, JobStatus.FAILED, worker["phase"], f"host {host}: {_failure_text(worker)}", nodes
                )
        leader = _summary(self.storage, job_id, "result.json")
        if leader is None:
            return None
        if leader["success"]:
            return JobState(job_id, JobStatus.SUCCEEDED, None, None, nodes)
        where = "host 0: " if nodes > 1 else ""
        return JobState(job_id, JobStatus.FAILED, leader["phase"], where + _failure_text(leader), nodes)

    def handle(self, job_id: str) -> dict[str, Any]:
        """The job's handle.json record, read once (it never changes); NotFoundError for an unknown job."""
        if job_id not in self._handles:
            try:
                self._handles[job_id] = json.loads(self.storage.get_bytes(f"{job_id}/{HANDLE}"))
            except NotFoundError:
                raise NotFoundError(f"unknown job {job_id!r}: no {HANDLE} in bucket {self.storage.bucket!r}") from None
        return self._handles[job_id]

    def _nodes(self, job_id: str) -> int:
        return int(self.handle(job_id).get("num_nodes") or 1)

    def _accelerator_text(self, job_id: str) -> str:
        return format_accelerator(_accelerator(self.handle(job_id)))

    def leader_pod(self, job_id: str) -> str | None:
        """The name of the pod of host 0 (where a debugged job's debugpy listens), if it exists."""
        pods = self._pods(job_id)
        return str(pods[0]["metadata"]["name"]) if pods else None

    def _pods(self, job_id: str) -> list[dict[str, Any]]:
        """The job's pods in host order (the LWS worker index; a Job has one host)."""
        items = self._items(
            self.clients.core.list_namespaced_pod, self.namespace, label_selector=manifests.job_selector(job_id)
        )
        return _host_order(items)

    def _pods_of(self, job_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The pods of each of `job_ids` in host order, listed through a set-based selector
        (`kinetic/job-id in (...)`), POD_IDS_PER_LIST ids per request to keep its URL short."""
        found: dict[str, list[dict[str, Any]]] = {}
        for start in range(0, len(job_ids), POD_IDS_PER_LIST):
            selector = f"{manifests.JOB_ID_LABEL} in ({','.join(job_ids[start : start + POD_IDS_PER_LIST])})"
            for pod in self._items(self.clients.core.list_namespaced_pod, self.namespace, label_selector=selector):
                found.setdefault(pod["metadata"].get("labels", {}).get(manifests.JOB_ID_LABEL), []).append(pod)
        return {job_id: _host_order(pods) for job_id, pods in found.items()}

    def _events(self, pod_name: str) -> list[dict[str, Any]]:
        return self._items(
            self.clients.core.list_namespaced_event, self.namespace, field_selector=f"involvedObject.name={pod_name}"
        )

    def _get(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """The response object, or None when the API says 404 (reads, and deletes of what is gone)."""
        try:
            return self._raw(call, *args, **kwargs)
        except api_error() as exc:
            if exc.status == 404:
                return None
            raise GkeError(f"Kubernetes API error in namespace {self.namespace!r}: {api_reason(exc)}") from None

    @staticmethod
    def _raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(call(*args, _preload_content=False, **kwargs).data)  # an API object
        return body

    @classmethod
    def _items(cls, call: Callable[..., Any], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """The objects a list call returns (a Kubernetes list object holds them under `items`), LIST_PAGE
        at a time through `limit`/`continue`, as the API server serves big lists: no response holds a
        workspace's whole history, and the server never builds one. A continue token that expired (410
        Gone: its snapshot was compacted) starts the list again, up to LIST_RESTARTS times, since pages of
        two snapshots would mix."""
        items: list[dict[str, Any]] = []
        token, restarts = None, 0
        while True:
            try:
                page = cls._raw(call, *args, limit=LIST_PAGE, **({"_continue": token} if token else {}), **kwargs)
            except api_error() as exc:
                if exc.status != 410 or token is None:
                    raise
                if restarts >= LIST_RESTARTS:
                    raise GkeError(f"a list kept expiring, started {restarts + 1} times: {api_reason(exc)}") from None
                items, token, restarts = [], None, restarts + 1
                continue
            items += page["items"]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items


def _host_order(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: int(p["metadata"].get("labels", {}).get(manifests.LWS_WORKER_INDEX, 0)))


def _accelerator(record: Mapping[str, Any]) -> AcceleratorConfig:
    return parse_accelerator(record["accelerator"])
