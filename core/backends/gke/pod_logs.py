"""A GKE job's pod logs: streamed and merged across hosts, followed from a client's thread, or only their
tails, which the API server cuts (tailLines) so a client never holds a whole log to show its end."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.backends.gke.k8s_client import K8sClients, api_error

Lines = queue.Queue[str | None]  # a pod's lines, then None once its stream ended


def stream(
    clients: K8sClients, namespace: str, pods: Sequence[Mapping[str, Any]], follow: bool, stop: threading.Event
) -> Iterator[list[str]]:
    """Batches of lines as the pods' streams deliver them (one reader thread per pod). Multi-host lines are
    prefixed with their host."""
    lines: Lines = queue.Queue()
    prefix = len(pods) > 1
    readers = [
        threading.Thread(target=_pump, args=(clients, namespace, pod, host, prefix, follow, lines, stop), daemon=True)
        for host, pod in enumerate(pods)
    ]
    for reader in readers:
        reader.start()
    running = len(readers)
    while running:
        batch: list[str] = []
        item = lines.get()
        while True:
            if item is None:
                running -= 1
            else:
                batch.append(item)
            if not running or len(batch) >= 1000:
                break
            try:
                item = lines.get_nowait()
            except queue.Empty:
                break
        if batch:
            yield batch


def tail(clients: K8sClients, namespace: str, pods: Sequence[Mapping[str, Any]], n: int) -> list[str]:
    """The last `n` lines in host order; each pod's API server sends only its own last `n`."""
    lines: Lines = queue.Queue()
    for host, pod in enumerate(pods):
        _pump(clients, namespace, pod, host, len(pods) > 1, False, lines, threading.Event(), n)
    kept: deque[str] = deque(maxlen=n)
    while not lines.empty():
        if (line := lines.get_nowait()) is not None:
            kept.append(line)
    return list(kept)


def _pump(
    clients: K8sClients,
    namespace: str,
    pod: Mapping[str, Any],
    host: int,
    prefix: bool,
    follow: bool,
    lines: Lines,
    stop: threading.Event,
    tail: int | None = None,
) -> None:
    label = f"[host {host}] " if prefix else ""
    limit = {} if tail is None else {"tail_lines": tail}
    try:
        response = clients.core.read_namespaced_pod_log(
            pod["metadata"]["name"],
            namespace,
            container=manifests.CONTAINER,
            follow=follow,
            _preload_content=False,
            **limit,
        )
        pending = b""
        for chunk in response.stream(None):
            if stop.is_set():
                response.release_conn()
                break
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                lines.put(label + line.decode(errors="replace"))
        if pending:
            lines.put(label + pending.decode(errors="replace"))
    except api_error():
        pass  # the pod went away or never started a container: there is no log to read
    finally:
        lines.put(None)


class PodLogReader:
    """A non-blocking view of a job's followed pod logs: `read` returns the lines that arrived since the
    last call. The stream is read in a daemon thread because a pod log stream can only be waited on."""

    def __init__(self, follow: Callable[[threading.Event], Iterator[list[str]]], drain_timeout: float = 5.0) -> None:
        self._lines: queue.Queue[list[str]] = queue.Queue()
        self._stop = threading.Event()
        self._drain_timeout = drain_timeout
        self._thread = threading.Thread(target=self._follow, args=(follow,), daemon=True)
        self._thread.start()

    def _follow(self, follow: Callable[[threading.Event], Iterator[list[str]]]) -> None:
        for batch in follow(self._stop):
            self._lines.put(batch)

    def read(self) -> list[str]:
        lines: list[str] = []
        while not self._lines.empty():
            lines.extend(self._lines.get_nowait())
        return lines

    def rest(self) -> list[str]:
        """What is left once the job settled: waits (bounded) for the stream to end, then stops it."""
        self._thread.join(self._drain_timeout)
        self._stop.set()
        return self.read()
