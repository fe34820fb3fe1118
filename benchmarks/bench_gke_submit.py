"""Submission overhead on the GKE path vs the local backend, for the same trivial function.

Candidate: `submit_gke` from a fresh JobContext up to the Job being created, against kmock (the
Kubernetes API emulator, in-process over HTTP) and fake-gcs-server (the jobs bucket over HTTP): pack,
three uploads (payload, archive, handle) and one create. Nothing runs the Job.
Baseline: `run_async` of the same function on the local backend, up to its job being queued and
launched (the job is then waited for outside the timing, so runs never pile up).
Both are measured interleaved in one run; medians are compared. Goal: ratio <= 2x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo, for the test doubles

from _workspace import fresh_workspace, median_ms, timed, user_module

ROUNDS = 30
PROJECT, CLUSTER = "kn-bench", "bench"


def start_fake_gcs() -> subprocess.Popen[bytes]:
    from tests.gcs_emulator import start_server

    process, endpoint = start_server(Path(tempfile.mkdtemp(prefix="kinetic-bench-gcs-")))
    os.environ["STORAGE_EMULATOR_HOST"] = endpoint
    return process


def main() -> None:
    fresh_workspace("kinetic-bench-gke-")
    module = user_module()
    from kinetic_tui.core.backends.gke.submission import submit_gke
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.profiles import jobs_bucket_name
    from kinetic_tui.core.submission.context import JobContext
    from tests.gcs_emulator import create_bucket
    from tests.gke.kubelet import kube_api

    gcs = start_fake_gcs()
    try:
        with kube_api() as api:
            os.environ["KINETIC_K8S_HOST"] = api.url
            create_bucket(os.environ["STORAGE_EMULATOR_HOST"], jobs_bucket_name(PROJECT, CLUSTER))

            def gke_submit() -> None:
                ctx = JobContext.from_params(
                    module.square,
                    "cpu",
                    backend="gke",
                    project=PROJECT,
                    cluster=CLUSTER,
                    container_image="python:3.11-slim",
                )
                submit_gke(ctx, (3,), {})

            handles = []

            def local_submit() -> None:
                handles.append(module.remote_square.run_async(3))

            gke_submit(), local_submit(), handles.pop().wait()  # warm both paths: imports, clients, fork server
            gke, local = [], []
            for _ in range(ROUNDS):
                gke.append(timed(gke_submit))
                local.append(timed(local_submit))
                handles.pop().wait()
    finally:
        launcher.shutdown_server()
        gcs.terminate()
        gcs.wait()
    g, b = median_ms(gke), median_ms(local)
    print(f"baseline local submit (run_async, queued + launched): {b:.1f} ms (median of {ROUNDS})")
    print(f"GKE submit (kmock + fake-gcs-server, Job created):    {g:.1f} ms  ratio {g / b:.2f}x  goal <= 2x")


if __name__ == "__main__":
    main()
