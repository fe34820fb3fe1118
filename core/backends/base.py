"""The interface every backend serves: `Backend` (one job at a time, pools, listings), `BatchDriver` (the
jobs of one `map`), and the shapes they answer with.

Handles (`core/jobs.py`), batches (`core/batches.py`), submission, the console and the training service are
written once against these protocols; the registry (`core/backends/registry.py`) picks the implementation.
A backend returns plain records (the `handle.json` dict of a job), never the handle or batch classes built
on it, so the backends sit below everything that uses them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus

if TYPE_CHECKING:
    from kinetic_tui.core.serving.config import EndpointConfig
    from kinetic_tui.core.storage import Storage
    from kinetic_tui.core.submission.context import JobContext

Call = tuple[Sequence[Any], Mapping[str, Any]]


class LogBatch(list[str]):
    """A batch of log lines that `read_logs(keep=N)` handed on after passing over `skipped` older lines
    unread: the caller shows only the newest N, and counts the rest as trimmed."""

    def __init__(self, lines: list[str], skipped: int) -> None:
        super().__init__(lines)
        self.skipped = skipped


def skipped_before(batch: list[str]) -> int:
    """Lines passed over unread before `batch` (0 for a plain batch)."""
    return batch.skipped if isinstance(batch, LogBatch) else 0


def manifest_key(group_id: str) -> str:
    """Where a batch's manifest lives in its jobs bucket (every backend keeps it there)."""
    return f"_groups/{group_id}/manifest.json"


def read_record(where: str, data: bytes) -> tuple[str, dict[str, Any]]:
    """A stored handle record and where it came from; a one-line error naming the file when it is corrupt."""
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise ValidationError(f"{where} is corrupt ({exc}); the job's record cannot be rebuilt") from None
    if not isinstance(record, dict):
        raise ValidationError(f"{where} is corrupt (not an object); the job's record cannot be rebuilt")
    return where, record


class JobInfo(Protocol):
    """A job's state as a backend reports it (a local JobRow, a GKE JobState or ClusterJob)."""

    @property
    def job_id(self) -> str: ...

    @property
    def status(self) -> JobStatus: ...

    @property
    def phase(self) -> str | None: ...

    @property
    def detail(self) -> str | None: ...

    @property
    def nodes(self) -> int: ...


class JobRecord(JobInfo, Protocol):
    """A job as a backend lists and refreshes it (a local JobRow, a GKE ClusterJob): its state, its times and
    its stored handle record; what the console's job snapshots are taken from."""

    @property
    def pool(self) -> str | None: ...

    @property
    def created_at(self) -> float: ...

    @property
    def started_at(self) -> float | None: ...

    @property
    def finished_at(self) -> float | None: ...

    @property
    def handle(self) -> dict[str, Any]: ...


class PoolInfo(Protocol):
    """A pool of nodes a job can be placed on: its shape, its size (the autoscaling maximum on a cloud) and use."""

    @property
    def name(self) -> str: ...

    @property
    def accelerator(self) -> str: ...

    @property
    def nodes(self) -> int: ...

    @property
    def spot(self) -> bool: ...

    @property
    def in_use(self) -> int: ...

    @property
    def queued(self) -> int: ...

    @property
    def emulated(self) -> bool: ...


@dataclass(frozen=True)
class JobState:
    """A job's state without a store row behind it (what a cloud backend reads from its cluster)."""

    job_id: str
    status: JobStatus
    phase: str | None = None
    detail: str | None = None
    nodes: int = 1


@dataclass(frozen=True)
class JobChanges:
    """What one look at a backend's jobs learned. `rows` newest first; with `complete` they are every job
    (replace what you hold), else only the jobs that are new or may have changed since the cursor passed
    in. Pass `cursor` to the next call."""

    rows: Sequence[JobRecord]
    complete: bool
    cursor: object = None


@dataclass
class DebugEndpoint:
    """Where a debugger attaches to a debugged job, and how to stop reaching it (a port-forward's end)."""

    host: str
    port: int
    stop: Callable[[], None] = field(default=lambda: None)
    forwarded: bool = False  # reached through a forward that lives only while this process keeps it


class LogReader(Protocol):
    """A non-blocking view of a job's log while a client waits: new lines per call, the rest at the end."""

    def read(self) -> list[str]: ...

    def rest(self) -> list[str]: ...


class BatchDriver(Protocol):
    """What a batch asks its backend; the retry, fail-fast and ordering rules stay in the batch."""

    def states(self, latest: Sequence[str], full: bool) -> list[tuple[JobStatus, float | None]]:
        """(status, finished_at or None) of each latest attempt, after settling what finished; `full=False`
        may settle only this batch's own work (a cheaper poll)."""
        ...

    def wait_for_news(self, seconds: float, each_input: bool) -> None:
        """Return within `seconds`, sooner when something of the batch may have settled since the last
        `states`: any input with `each_input`, else something that frees room for the next inputs."""
        ...

    def record(self, job_id: str) -> dict[str, Any] | None:
        """The handle record of one of the batch's jobs, if the driver has it at hand (else attach it)."""
        ...

    def retry(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Submit a new attempt of the job `record` describes; its handle record."""
        ...

    def settled(self) -> Mapping[str, JobRecord]:
        """The batch's jobs whose results `result_bytes` can read in bulk (may be empty)."""
        ...

    def result_bytes(self, info: JobInfo, files: dict[str, bytes]) -> bytes | None:
        """A settled job's result pickle when it is not under the job's own prefix (`files` caches reads)."""
        ...

    def cancel(self, job_id: str) -> None: ...

    def cleanup(self, job_ids: Sequence[str], k8s: bool, gcs: bool) -> None:
        """In one pass over these jobs, those settled: with `k8s` remove what runs them (working directories,
        workloads), with `gcs` their uploaded inputs (payload, archive); unsettled ones are left alone."""
        ...


@dataclass(frozen=True)
class Submitted:
    """A submitted `map`: where its manifest lives, its driver, and the handle records of its inputs."""

    manifest: dict[str, Any]
    storage: Storage
    driver: BatchDriver
    records: list[dict[str, Any]]


class ClusterEndpoints(Protocol):
    """A cluster that serves endpoints itself: it runs their replicas and scales them with its own autoscaler,
    so the workspace starts no router, instance or controller for them."""

    def target(self) -> dict[str, Any]:
        """Where the cluster is, as a handle record names it (`backend_for_handle` reaches it again)."""
        ...

    def describe_target(self) -> str:
        """The cluster and namespace in words, for messages."""
        ...

    def deploy_endpoint(self, config: EndpointConfig, routes: Mapping[str, Any]) -> dict[str, str]:
        """Create or replace the endpoint's objects serving `routes` (the versions it answers for); their
        names. Bad config raises before anything is written."""
        ...

    def remove_endpoint(self, name: str) -> None:
        """Delete the endpoint's objects (its replicas with them); NotFoundError when it has none there."""
        ...

    def endpoint_status(self, name: str) -> dict[str, Any]:
        """What the cluster reports of the endpoint: its objects and replica counts."""
        ...


class Backend(Protocol):
    """Runs jobs for one workspace or cluster. Blocking: async callers use worker threads."""

    @property
    def kind(self) -> str: ...

    # -- submission ---------------------------------------------------------------------------------------

    def submit_call(self, ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Check, pack, upload and queue one call; its handle record. Bad input raises before any write."""
        ...

    def submit_map(self, contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]) -> Submitted:
        """One job per call; the manifest is written before the first input is queued."""
        ...

    def attach_batch(self, group_id: str) -> Submitted | None:
        """A batch this backend knows by group id (records left empty), else None."""
        ...

    # -- one job --------------------------------------------------------------------------------------------

    def find_record(self, job_id: str) -> tuple[str, dict[str, Any]] | None:
        """(where it was found, the handle record) of a job this backend knows, else None."""
        ...

    def lookup_error(self, job_id: str) -> str:
        """Why `job_id` is unknown here, naming where this backend looked."""
        ...

    def record(self, job_id: str) -> dict[str, Any]:
        """The handle record of a job; NotFoundError naming the job when unknown."""
        ...

    def refresh(self, job_id: str) -> JobRecord:
        """The job's state after one step of progress (settle it if done, start it if it fits)."""
        ...

    def finished_among(self, job_ids: Sequence[str]) -> Mapping[str, JobRecord | None]:
        """Which of `job_ids` finished, after one step of progress for all of them (as `refresh` gives each):
        their records, None for ids this backend does not know, the active ones absent. A driver watching
        many jobs pays one settle and one read per look, not one per job."""
        ...

    def wait(
        self, job_id: str, timeout: float | None = None, on_poll: Callable[[], None] | None = None
    ) -> JobRecord: ...

    def read_logs(
        self, job_id: str, follow: bool = False, stop: threading.Event | None = None, keep: int | None = None
    ) -> Iterator[list[str]]:
        """Batches of the log's lines. With `keep`, the caller shows only the newest `keep` lines: a backend
        that can seek may pass over older lines already written, handing a `LogBatch` that counts them."""
        ...

    def log_reader(self, job_id: str) -> LogReader: ...

    def tail_logs(self, job_id: str, n: int) -> list[str]:
        """The log's last `n` lines, read without holding the whole log (multi-host lines prefixed)."""
        ...

    def bucket_uri(self, bucket: str, key: str) -> str:
        """The URI of `key` in jobs bucket `bucket` as this backend's jobs (and its clients) reach it."""
        ...

    def exit_code(self, job_id: str) -> int | None:
        """Host 0's exit code once the job's process ended (a preempted training exits with its own code)."""
        ...

    def result_bytes(self, info: JobInfo) -> bytes | None:
        """A settled job's result pickle when it is not under its own prefix (None: read the prefix)."""
        ...

    def cancel(self, job_id: str) -> JobRecord: ...

    def cleanup(self, job_id: str, workload: bool = True, uploads: bool = True) -> None:
        """Remove a finished job's `workload` (its processes' working directories, or its cluster resources)
        and its `uploads` under the jobs bucket; records a finished job is still asked about stay."""
        ...

    def leftover(self, job_id: str, files: bool) -> str | None:
        """What of a stopped or cleaned-up job is still there, in words (its processes, and with `files` its
        working directories; its workload object on a cluster, which a deletion keeps until its pods are
        gone); None once nothing is. What `cancel` and `cleanup` wait on."""
        ...

    def debug_endpoint(self, job_id: str, host: str, port: int, local_port: int) -> DebugEndpoint:
        """Where this machine reaches the debugpy a job listens with on `host:port` (a cluster forwards
        `local_port` to its pod)."""
        ...

    # -- endpoints ------------------------------------------------------------------------------------------

    def cluster_endpoints(self) -> ClusterEndpoints | None:
        """The cluster that serves this backend's endpoints itself; None when the workspace runs them (a
        router and instance jobs that the supervisor's controller scales)."""
        ...

    # -- listings and pools ---------------------------------------------------------------------------------

    def jobs(self, status: JobStatus | None = None, limit: int | None = None) -> Sequence[JobRecord]:
        """Newest first, after settling what finished."""
        ...

    def job_changes(self, cursor: object = None) -> JobChanges:
        """After settling what finished: the jobs new or changed since `cursor` (a previous answer's; None:
        every job). A console that polls through this pays for what is active, not for the history."""
        ...

    def prune(self, before: float) -> tuple[int, int]:
        """Remove the jobs that finished before `before` (epoch seconds), their rows and files: (removed,
        kept because something still reads them)."""
        ...

    def pools(self) -> Sequence[PoolInfo]: ...

    def pool(self, name: str) -> PoolInfo: ...

    def add_pool(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> PoolInfo: ...

    def remove_pool(self, name: str) -> PoolInfo: ...

    def placement(self, accelerator: str, num_nodes: int) -> str | None:
        """The pool a job of this shape would run on (None: none provides it)."""
        ...
