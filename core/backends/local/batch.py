"""`map` on the local backend: the inputs run in lanes when they fit (lanes.py), else one job process each;
the scheduler enforces the group's `max_concurrent`, so the limit holds even when the submitting client exits.
A watching batch settles only its own exited inputs and lanes between full reconciles (a cheaper poll)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kinetic_tui.core.backends.base import Call, JobInfo, Submitted, manifest_key
from kinetic_tui.core.backends.local import exit_watch, lanes, launcher
from kinetic_tui.core.backends.local.backend import JobRow, LocalBackend
from kinetic_tui.core.backends.local.submission import (
    jobs_storage,
    lanes_fit,
    resubmit,
    stage,
    stage_lanes,
)
from kinetic_tui.core.backends.local.trash import discard
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.storage import LocalStorage, bucket_storage
from kinetic_tui.core.store import jobs_repo
from kinetic_tui.core.submission.context import JobContext, function_key
from kinetic_tui.core.submission.pack import CONTEXT, PAYLOAD

EXIT_POLL = 0.003  # seconds between looks at exit files and lane progress while a batch waits


class LocalBatchDriver:
    """The local half of a batch: statuses from the store, news from exit files and lane progress."""

    def __init__(self, backend: LocalBackend, group_id: str) -> None:
        self.backend = backend
        self.group_id = group_id
        self._running: list[JobRow] = []

    def states(self, latest: Sequence[str], full: bool) -> list[tuple[JobStatus, float | None]]:
        backend = self.backend
        if full:
            backend.reconcile()
        else:
            for job_id in self._exited():
                backend.reconcile(job_id)
            backend.observe_lanes(lanes.active(backend.store, self.group_id), patient=False)
        states = backend.group_statuses(self.group_id)
        found = [states.get(job_id) for job_id in latest]
        running = any(state and state[0] is JobStatus.RUNNING for state in found)
        self._running = (
            backend.jobs(status=JobStatus.RUNNING, group_id=self.group_id, outside_lanes=True) if running else []
        )
        return [state or (JobStatus.NOT_FOUND, None) for state in found]

    def _exited(self) -> list[str]:
        """Running inputs outside lanes whose every host has an exit file: settling them needs no liveness scan."""
        return [
            row.job_id
            for row in self._running
            if row.hosts and all(launcher.exit_code(row.job_dir, h.host) is not None for h in row.hosts)
        ]

    def wait_for_news(self, seconds: float, each_input: bool) -> None:
        """With `each_input`, look every EXIT_POLL for an input's exit or a lane's progress. Without, wake
        only when a node frees (an input's process or a lane ended, so the next chunk can start): the
        spawn sockets of what this process launched wake it (exit_watch), the rest is looked at every
        EXIT_POLL. A waiter that needs only the batch's end so leaves both cores to the lanes; it applies
        their progress at its next poll, and copies the store's log into its file first (a checkpoint,
        otherwise paid by one of its commits)."""
        end = time.monotonic() + seconds
        store = self.backend.store
        if not each_input:
            store.checkpoint()
        open_lanes = [] if each_input else lanes.active(store, self.group_id)
        while True:
            if each_input:
                open_lanes = lanes.active(store, self.group_id)  # a lane opened meanwhile is news too
            if self._exited() or any(lane.has_news() if each_input else lane.has_ended() for lane in open_lanes):
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            if each_input:
                time.sleep(min(left, EXIT_POLL))
            else:
                watched = [lane.dir for lane in open_lanes] + [row.job_dir for row in self._running]
                exit_watch.pause_any(watched, left, EXIT_POLL)

    def record(self, job_id: str) -> dict[str, Any] | None:
        return None  # attach finds it: in the store, or in the group's handles.json

    def retry(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return resubmit(self.backend, record)

    def settled(self) -> dict[str, JobRow]:
        return {row.job_id: row for row in self.backend.jobs(group_id=self.group_id)}

    def result_bytes(self, info: JobInfo, files: dict[str, bytes]) -> bytes | None:
        # `info` is one of `settled()`'s values, which are this backend's JobRows
        return self.backend.lane_result(cast(JobRow, info), files)

    def cancel(self, job_id: str) -> None:
        self.backend.cancel(job_id)

    def cleanup(self, job_ids: Sequence[str], k8s: bool, gcs: bool) -> None:
        """One query for the group; only inputs that ran as their own process have a working directory and
        inputs of their own (a lane's are the batch's, and the lane removes its working directory)."""
        wanted = set(job_ids)
        for row in self.backend.jobs(group_id=self.group_id, outside_lanes=True):
            if row.job_id not in wanted or not row.status.finished or row.in_lane:
                continue
            if k8s:
                discard(row.job_dir / "work")
            if gcs:
                storage = bucket_storage(row.handle["bucket"], row.handle["result_uri"])
                for name in (PAYLOAD, CONTEXT):
                    storage.delete_prefix(f"{row.job_id}/{name}")


def submit_map(
    backend: LocalBackend, contexts: Sequence[JobContext], calls: Sequence[Call], manifest: dict[str, Any]
) -> Submitted:
    """Stage every input (a bad one submits nothing), write the manifest and the group, then queue them."""
    group_id = manifest["group_id"]
    storage = jobs_storage(manifest["bucket"])
    in_lanes = bool(calls) and lanes_fit(contexts[0], storage)
    staging: Any = (
        stage_lanes(backend, contexts, calls, storage)
        if in_lanes
        else stage(backend, [(ctx, args, kwargs) for ctx, (args, kwargs) in zip(contexts, calls)], numbered=True)
    )
    with staging as staged:
        storage.put_bytes(manifest_key(group_id), json.dumps(manifest).encode())
        jobs_repo.insert_group(
            backend.store, group_id, manifest["max_concurrent"], time.time(), function_key(contexts[0].func)
        )
        records = staged.submit() if in_lanes else [item.submit() for item in staged]
    return Submitted(manifest, storage, LocalBatchDriver(backend, group_id), records)


def attach_batch(backend: LocalBackend, group_id: str) -> Submitted | None:
    """Through the store's jobs of the group (whatever bucket they use), else the manifest in the local
    buckets (a batch with no inputs has no jobs)."""
    driver = LocalBatchDriver(backend, group_id)
    rows = backend.jobs(group_id=group_id, limit=1)
    if rows:
        storage = bucket_storage(rows[0].handle["bucket"], rows[0].handle["result_uri"])
        return Submitted(json.loads(storage.get_bytes(manifest_key(group_id))), storage, driver, [])
    buckets = kinetic_home() / "local" / "buckets"
    for path in sorted(buckets.glob(f"*/_groups/{group_id}/manifest.json")) if buckets.is_dir() else []:
        manifest = json.loads(path.read_text())
        return Submitted(manifest, LocalStorage.in_home(manifest["bucket"]), driver, [])
    return None
