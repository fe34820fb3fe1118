"""A big `map` on a GKE profile as the cluster and the jobs bucket hold it mid-run, built in a fraction of a
second (the polling tests and benchmark): the Jobs go straight into kmock's store (`KubeApi.put`), and the
bucket gets only what a poll reads (the manifest, the handles of the started inputs, the finished inputs'
result summaries). Nothing runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kinetic_tui.core.backends.base import manifest_key
from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.storage import Storage
from tests.gke.kubelet import KubeApi


@dataclass(frozen=True)
class SeededBatch:
    group_id: str
    job_ids: list[str]
    running: list[str]  # started, pod Running
    finished: list[str]  # started, Job Complete with its result written
    suspended: list[str]


def _job(job_id: str, group_id: str, suspend: bool, complete: bool) -> dict[str, Any]:
    labels = {**manifests.labels(job_id), manifests.GROUP_LABEL: group_id}
    status: dict[str, Any] = {"active": 0 if complete or suspend else 1}
    if complete:
        status["conditions"] = [{"type": "Complete", "status": "True", "reason": "Completed"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_id, "labels": labels},
        "spec": {"suspend": suspend},
        "status": status,
    }


def _pod(job_id: str, phase: str) -> dict[str, Any]:
    labels = {**manifests.labels(job_id), "job-name": job_id}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job_id}-pod", "labels": labels},
        "status": {"phase": phase},
    }


def seed_batch(
    api: KubeApi,
    storage: Storage,
    namespace: str,
    count: int,
    limit: int,
    finished: int,
    group_id: str = "grp-0000beef",
) -> SeededBatch:
    """`count` inputs with max_concurrent `limit`: the first `limit` started (the first `finished` of them
    complete and succeeded), the rest suspended."""
    job_ids = [f"job-{n:08x}" for n in range(count)]
    started = job_ids[:limit]
    done = started[:finished]
    api.put(
        "batch/v1/jobs",
        namespace,
        [_job(job_id, group_id, index >= limit, job_id in done) for index, job_id in enumerate(job_ids)],
    )
    api.put("v1/pods", namespace, [_pod(job_id, "Succeeded" if job_id in done else "Running") for job_id in started])
    manifest = {
        "group_id": group_id,
        "group_kind": "map",
        "group_name": None,
        "tags": {},
        "func_name": "cube",
        "submit_fn_name": "cube",
        "count": count,
        "total_expected": count,
        "max_concurrent": limit,
        "retries": 0,
        "fail_fast": False,
        "cancel_running_on_fail": False,
        "bucket": storage.bucket,
        "attempts": [[job_id] for job_id in job_ids],
        "image": {"image": "python:3.11-slim", "install_requirements": []},
    }
    storage.put_bytes(manifest_key(group_id), json.dumps(manifest).encode())
    for job_id in started:
        handle = {"job_id": job_id, "backend": "gke", "accelerator": "cpu", "num_nodes": 1, "group_id": group_id}
        storage.put_bytes(f"{job_id}/handle.json", json.dumps(handle).encode())
    for job_id in done:
        storage.put_bytes(f"{job_id}/result.json", json.dumps({"success": True}).encode())
    return SeededBatch(group_id, job_ids, started[finished:], done, job_ids[limit:])
