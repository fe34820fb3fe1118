"""The Pathways backend, which TPU slices of more than one host select by default: a slice as one
leaderworkerset.x-k8s.io/v1 LeaderWorkerSet of `num_nodes` pods, host 0 the leader.

A LeaderWorkerSet has no notion of completion (its pods run under StatefulSets, which restart whatever
exits), so completion is read from the result files: host 0 writes `result.json`, a failing worker
`result-worker-{i}.json`. A leader success counts only once every worker has exited cleanly, and a
worker's failure turns it into the job's failure. Once decided, the outcome is recorded and the
LeaderWorkerSet deleted, so nothing is restarted after the job is done.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kinetic_tui.core.backends.base import JobState
from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.backends.gke.backend import GkeBackend, container_exit_code
from kinetic_tui.core.job_status import JobStatus

LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"


class PathwaysBackend(GkeBackend):
    kind = "pathways"
    multi_host = True

    def manifest(self, spec: manifests.WorkloadSpec) -> dict[str, Any]:
        return manifests.leaderworkerset_manifest(spec)

    def _create(self, manifest: dict[str, Any]) -> None:
        self.clients.custom.create_namespaced_custom_object(
            LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, manifest, _preload_content=False
        )

    def _read(self, job_id: str) -> dict[str, Any] | None:
        return self._get(
            self.clients.custom.get_namespaced_custom_object, LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, job_id
        )

    def _list(self) -> list[dict[str, Any]]:
        return self._items(
            self.clients.custom.list_namespaced_custom_object,
            LWS_GROUP,
            LWS_VERSION,
            self.namespace,
            LWS_PLURAL,
            label_selector=manifests.ALL_JOBS_SELECTOR,
        )

    def _delete(self, job_id: str, propagation: str) -> None:
        self._get(
            self.clients.custom.delete_namespaced_custom_object,
            LWS_GROUP,
            LWS_VERSION,
            self.namespace,
            LWS_PLURAL,
            job_id,
            propagation_policy=propagation,
        )

    def _verdict(self, job_id: str, workload: Mapping[str, Any], pods: list[dict[str, Any]]) -> JobState | None:
        codes = {host: container_exit_code(pod) for host, pod in enumerate(pods)}
        state = self._from_results(job_id)
        if state is None:
            crashed = next((host for host, code in codes.items() if code not in (None, 0)), None)
            if crashed is None:
                return None
            state = JobState(
                job_id,
                JobStatus.FAILED,
                "runner",
                f"host {crashed} exited with {codes[crashed]} without a result",
                self._nodes(job_id),
            )
        elif state.status is JobStatus.SUCCEEDED and any(codes.get(host) is None for host in range(1, len(pods))):
            return None  # the leader is done; a worker may still fail
        return self._settle(job_id, state.status, state.phase, state.detail)
