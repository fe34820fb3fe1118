"""`run(debug=True)` on the GKE backend: kmock as the API server, fake GCS as the bucket, the kubelet double
running the pod's runner on this machine. kmock has no `pods/portforward` streaming, so `kubectl` is a
double on PATH that records its arguments and forwards TCP to the port the pod (a local process) listens
on; everything else is the backend's real path: `debug.json` read from the bucket, the leader pod found
through the API, the forward started and stopped, a debugger attached through it."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core import debugging
from kinetic_tui.core.backends.gke.port_forward import PortForwardError
from kinetic_tui.core.job_status import JobStatus
from tests.gke.kubelet import Cluster, cluster, kube, wait_for_workload
from tests.gke.test_gke_backend import jobs, submit
from tests.helpers.dap import attach_and_continue

FAKE_KUBECTL = """\
#!{python}
import json, socket, sys, threading
args = sys.argv[1:]
with open({log!r}, "a") as out:
    out.write(json.dumps(args) + "\\n")
if {fail}:
    sys.stderr.write("error: unable to upgrade connection: pod does not exist\\n")
    sys.exit(1)
local, remote = (int(p) for p in next(a for a in args if ":" in a and a[0].isdigit()).split(":"))
server = socket.create_server(("127.0.0.1", local))
print(f"Forwarding from 127.0.0.1:{{local}} -> {{remote}}", flush=True)

def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        b.close()

while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", remote))
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fake_kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> Path:
    bin_dir, log = tmp_path / "bin", tmp_path / "kubectl.log"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(FAKE_KUBECTL.format(python=sys.executable, log=str(log), fail=fail))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_a_gke_debug_job_is_reached_through_a_port_forward_to_its_pod(
    cluster: Cluster, jobs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod_port, local_port = free_port(), free_port()
    monkeypatch.setattr(debugging, "DEBUGPY_PORT", pod_port)  # the pod's port: a free one on this machine
    monkeypatch.setenv("KINETIC_DEBUG_WAIT_TIMEOUT", "45")
    log = fake_kubectl(tmp_path, monkeypatch)
    handle = submit(jobs.add, 2, 5, debug=True)
    name = wait_for_workload(cluster.kubelet, "job")
    pod, process = cluster.kubelet.start_job(name)
    try:
        with handle.debug_attach(local_port=local_port, timeout=45) as session:
            assert (session.host, session.port, session.forwarded) == ("127.0.0.1", local_port, True)
            attach_and_continue(session.host, session.port)
    finally:
        code = cluster.kubelet.finish_job(name, pod, process)
    assert code == 0 and handle.result(timeout=30) == 7
    (args,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert args[:2] == ["--server", os.environ["KINETIC_K8S_HOST"]]
    assert args[2:] == [
        "port-forward",
        "--address",
        "127.0.0.1",
        f"pod/{pod['metadata']['name']}",
        f"{local_port}:{pod_port}",
        "-n",
        cluster.namespace,
    ]


def test_a_failed_port_forward_is_one_line_naming_kubectls_error(
    cluster: Cluster, jobs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(debugging, "DEBUGPY_PORT", free_port())
    monkeypatch.setenv("KINETIC_DEBUG_WAIT_TIMEOUT", "0.5")
    fake_kubectl(tmp_path, monkeypatch, fail=True)
    handle = submit(jobs.add, 1, 1, debug=True)
    name = wait_for_workload(cluster.kubelet, "job")
    pod, process = cluster.kubelet.start_job(name)
    try:
        with pytest.raises(PortForwardError, match="unable to upgrade connection") as info:
            handle.debug_attach(local_port=free_port(), timeout=45)
        assert "\n" not in str(info.value)
    finally:
        cluster.kubelet.finish_job(name, pod, process)
    assert handle.status() is JobStatus.SUCCEEDED and handle.result(timeout=30) == 2
