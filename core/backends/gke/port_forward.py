"""Reach a pod's port from this machine with `kubectl port-forward`, as Kinetic does for its debugger.

kubectl speaks the API server's streaming protocol that the Python SDK only half supports; it is told the
same API server the backends use (`KINETIC_K8S_HOST`, else the kubeconfig context gcloud writes). The
forward is ready once kubectl prints its `Forwarding from` line; it ends when the returned endpoint stops.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

from kinetic_tui.core.backends.base import DebugEndpoint
from kinetic_tui.core.backends.gke.k8s_client import HOST_SETTING, kube_context
from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.profiles import ResolvedInfra

STARTUP_SECONDS = 15.0


class PortForwardError(KineticError, RuntimeError):
    """kubectl is missing, or its port-forward ended before it was ready."""


def kubectl_command(infra: ResolvedInfra, pod: str, remote_port: int, local_port: int) -> list[str]:
    host = os.environ.get(HOST_SETTING)
    where = ["--server", host] if host else ["--context", kube_context(infra)]
    return [
        "kubectl",
        *where,
        "port-forward",
        "--address",
        "127.0.0.1",
        f"pod/{pod}",
        f"{local_port}:{remote_port}",
        "-n",
        infra.namespace,
    ]


def port_forward(infra: ResolvedInfra, pod: str, remote_port: int, local_port: int) -> DebugEndpoint:
    """Forward 127.0.0.1:`local_port` to `pod`:`remote_port`; PortForwardError naming kubectl's message."""
    command = kubectl_command(infra, pod, remote_port, local_port)
    if shutil.which(command[0]) is None:
        raise PortForwardError("kubectl is not on PATH: install it (gcloud components install kubectl)")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = threading.Event()

    def watch() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("Forwarding from"):
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    if not ready.wait(STARTUP_SECONDS) or process.poll() is not None:
        process.kill()
        process.wait()
        message = (process.stderr.read() if process.stderr else "").strip().splitlines()
        raise PortForwardError(
            f"kubectl port-forward to pod {pod} port {remote_port} failed: "
            f"{message[-1] if message else 'not ready after ' + str(STARTUP_SECONDS) + ' s'}; "
            f"if port {local_port} is taken here, pass another local port"
        )

    def stop() -> None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    return DebugEndpoint("127.0.0.1", local_port, stop, forwarded=True)
