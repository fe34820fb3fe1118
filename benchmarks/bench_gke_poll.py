"""What one poll of a big GKE `map` costs the Kubernetes API, against kmock paging as the API server does.

Setup per size: a batch of N inputs with max_concurrent=20 as the cluster holds it mid-run (tests/gke/seeding.py:
the Jobs straight into kmock, 20 started with Running pods, the rest suspended; handles in fake-gcs-server).
Candidate: `GkeBatchDriver.states`, the poll `wait`/`results`/`status_list` make (one labelled list of the
batch's Jobs, paged 500 at a time, one pod list for the live inputs, an outcome read per live input).
Baseline, named "per-input poll": the same answer read the way polls were read before, one labelled list
for the suspended inputs and `GkeBackend.refresh` (a Job read and a pod list) per live input.
Both are measured interleaved in one run; API calls are counted from kmock's request log, times are medians.
Goal: <= 25 API calls per poll for N = 2,000.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for the test doubles

from _workspace import fresh_workspace, median_ms, timed
from bench_gke_submit import start_fake_gcs

SIZES = (500, 2000, 8000)
LIMIT = 20
ROUNDS = 5
PROJECT, CLUSTER = "kn-bench", "bench"


def measure(api: Any, poll: Callable[[], Any]) -> tuple[int, float]:
    """(API calls, seconds) of one poll."""
    before = len(api.requests())
    seconds = timed(poll)
    return len(api.requests()) - before, seconds


def one_size(api: Any, clients: Any, bucket: str, size: int) -> tuple[list[tuple[int, float]], ...]:
    """Both polls of a batch of `size` inputs, interleaved: (candidate rounds, baseline rounds)."""
    from kinetic_tui.core.backends.gke.backend import GkeBackend
    from kinetic_tui.core.backends.gke.batches import GkeBatchDriver
    from kinetic_tui.core.storage import GcsStorage
    from tests.gke.seeding import seed_batch

    namespace = f"poll-{size}"
    seeded = seed_batch(api, GcsStorage(bucket), namespace, count=size, limit=LIMIT, finished=0)
    backend = GkeBackend(clients, GcsStorage(bucket), namespace)
    driver = GkeBatchDriver({"group_id": seeded.group_id, "max_concurrent": LIMIT}, backend)

    def candidate() -> None:
        driver.states(seeded.job_ids, True)

    def per_input() -> None:
        backend.batch_states(seeded.group_id, [])  # the one labelled list of the batch's Jobs
        for job_id in seeded.running:
            backend.refresh(job_id)

    candidate(), per_input()  # warm: clients, connections, cached handles
    ours, theirs = [], []
    for _ in range(ROUNDS):
        ours.append(measure(api, candidate))
        theirs.append(measure(api, per_input))
    return ours, theirs


def main() -> None:
    fresh_workspace("kinetic-bench-gke-poll-")
    from kinetic_tui.core.backends.gke.k8s_client import clients_for
    from kinetic_tui.core.profiles import jobs_bucket_name, resolve_infra
    from tests.gcs_emulator import create_bucket
    from tests.gke.kubelet import kube_api

    gcs = start_fake_gcs()
    rows = []
    try:
        with kube_api() as api:
            os.environ.update(KINETIC_K8S_HOST=api.url, KINETIC_PROJECT=PROJECT, KINETIC_CLUSTER=CLUSTER)
            bucket = create_bucket(os.environ["STORAGE_EMULATOR_HOST"], jobs_bucket_name(PROJECT, CLUSTER))
            clients = clients_for(resolve_infra(backend="gke"))
            rows = [(size, *one_size(api, clients, bucket, size)) for size in SIZES]
    finally:
        gcs.terminate()
        gcs.wait()
    print(f"one poll of a map with max_concurrent={LIMIT} ({LIMIT} live inputs), medians of {ROUNDS} rounds:")
    for size, ours, theirs in rows:
        c, b = median_ms([s for _, s in ours]), median_ms([s for _, s in theirs])
        calls, base_calls = max(n for n, _ in ours), max(n for n, _ in theirs)
        goal = "  goal <= 25 calls" if size == 2000 else ""
        print(
            f"  {size:>5} inputs: poll {calls:>3} API calls {c:7.1f} ms | baseline per-input poll "
            f"{base_calls:>3} API calls {b:7.1f} ms | time ratio {c / b:.2f}x{goal}"
        )


if __name__ == "__main__":
    main()
