"""Test doubles for a GKE cluster: an API server (kmock) and a kubelet that runs pods on this machine.

`KubeApi` runs kmock's KubernetesEmulator in a thread with its own event loop, so the backend's
synchronous kubernetes client talks to it over real HTTP. kmock stores, patches, lists and deletes
objects but does not do four things a real API server does; `KineticEmulator` adds them, and the tests
rely on them only in these honest forms:
- `labelSelector` (equality terms `k=v` and set terms `k in (a,b)`) and `fieldSelector=involvedObject.name=...`
  on lists, paged with `limit`/`continue` as the API server pages (listing.py: opaque tokens, 410 Gone once a
  token's snapshot expires);
- PUT on a named object (a replace): the body becomes the object's new version whole, 404 when absent;
- the `pods/{name}/log` subresource (kmock would answer with the pod object): served from a log store
  the kubelet double fills, and with `follow=true` streamed until the kubelet marks the container done
  (`tailLines` without `follow`: only the last N lines).

`Kubelet` plays the Job / LeaderWorkerSet controllers and the kubelet, through the same HTTP API a real
one uses: it reads the workload the backend created, creates its pods (with the LWS worker-index label),
runs each pod's container command LOCALLY (`python` -> sys.executable, the image's
/kinetic/remote_runner.py -> this repo's runner, env from the manifest with downward-API fieldRefs
resolved from the pod, a CSI volume mount -> a local directory, STORAGE_EMULATOR_HOST set), streams its
output into the pod log, and writes pod and workload status back. Diagnostics tests instead write the
pod conditions, container waiting states and events a real cluster would.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import io
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
from kmock import KubernetesEmulator, KubernetesError, ResourceInfo, Server

from kinetic_tui.core.backends.gke import manifests
from kinetic_tui.core.backends.gke.backend import GkeBackend
from kinetic_tui.core.backends.gke.k8s_client import K8sClients, clients_for
from kinetic_tui.core.backends.gke.pathways import LWS_GROUP, LWS_PLURAL, LWS_VERSION
from kinetic_tui.core.backends.gke.submission import backend_class
from kinetic_tui.core.profiles import jobs_bucket_name, resolve_infra
from kinetic_tui.core.storage import GcsStorage
from kinetic_tui.infra import serving_image
from kinetic_tui.infra.container_builder import BuildInputs, ImageBuild
from tests.gcs_emulator import create_bucket
from tests.gke.listing import Expired, Pager

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "runner" / "remote_runner.py"
RESOURCES = {
    "batch/v1/jobs": "Job",
    "v1/pods": "Pod",
    "v1/events": "Event",
    "v1/services": "Service",
    "apps/v1/deployments": "Deployment",
    "autoscaling/v2/horizontalpodautoscalers": "HorizontalPodAutoscaler",
    f"{LWS_GROUP}/{LWS_VERSION}/{LWS_PLURAL}": "LeaderWorkerSet",
}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _label_terms(selector: str) -> Iterator[tuple[str, set[str]]]:
    """(key, allowed values) per term of a label selector: `k=v` or `k in (a,b,...)`."""
    for term in re.findall(r"[^,(]+\([^)]*\)|[^,]+", selector):
        key, found, values = term.partition(" in ")
        if found:
            yield key.strip(), {value.strip() for value in values.strip()[1:-1].split(",")}
        else:
            key, _, value = term.partition("=")
            yield key, {value}


def _matches(obj: Mapping[str, Any], params: Mapping[str, str]) -> bool:
    metadata = obj.get("metadata") or {}
    for key, values in _label_terms(params.get("labelSelector") or ""):
        if (metadata.get("labels") or {}).get(key) not in values:
            return False
    for term in filter(None, (params.get("fieldSelector") or "").split(",")):
        key, _, value = term.partition("=")
        if key == "involvedObject.name" and (obj.get("involvedObject") or {}).get("name") != value:
            return False
    return True


# The request a handler task is answering. kmock finds the reaction for a request by asking each reaction's
# view whether it holds the request, and a view answers by walking the whole request history: quadratic in the
# requests served, most of a GKE test's time once a poller has made a few thousand. While a request is being
# answered, the history its own task sees is that request alone; the reactions here (the emulator's own) filter
# by the request's fields, never by what came before it, so each finds the same reaction.
_ANSWERING: contextvars.ContextVar[Any] = contextvars.ContextVar("answering", default=None)


class KineticEmulator(KubernetesEmulator):
    """kmock's emulator plus label/field selectors on lists and a pod log subresource."""

    def __iter__(self) -> Iterator[Any]:
        answering = _ANSWERING.get()
        return iter([answering]) if answering is not None else super().__iter__()

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.logs: dict[tuple[str, str], bytes] = {}
        self.logs_done: set[tuple[str, str]] = set()
        self.log_lock = threading.Lock()
        self.pager = Pager()

    @property
    def list_pages(self) -> int:
        """List responses served (each page of each list call counts)."""
        return self.pager.pages

    async def _serve_list(self, request: Any) -> Any:
        """Filtered by the selectors and paged as the API server pages (listing.py). A later page reads the
        list's snapshot only: kmock's own list of every object is built for the first page."""
        continued = bool(request.params.get("continue"))
        listing = {"metadata": {}, "items": []} if continued else await super()._serve_list(request)
        try:
            listing["items"], metadata = self.pager.page(
                request.params, lambda: [item for item in listing["items"] if _matches(item, request.params)]
            )
        except Expired as exc:
            raise KubernetesError(status=410, reason="Expired", message=str(exc)) from None
        listing.setdefault("metadata", {}).update(metadata)
        return listing

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.resource.plural == "pods" and request.subresource == "log":
            return await self._serve_log(request)
        if request.resource is not None and request.method == "PUT" and request.name and not request.subresource:
            return await self._serve_replace(request)
        token = _ANSWERING.set(request)
        try:
            return await super()._handle(request)
        finally:
            _ANSWERING.reset(token)

    async def _serve_replace(self, request: Any) -> aiohttp.web.StreamResponse:
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return aiohttp.web.json_response(
                    {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}, status=404
                )
            self._objects[key].delete()
            self._objects[key].create(request.data)
            return aiohttp.web.json_response(self._objects[key].last.raw)

    async def _serve_log(self, request: Any) -> aiohttp.web.StreamResponse:
        key = (request.namespace, request.name)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request._raw_request)
        sent, follow = 0, request.params.get("follow") == "true"
        while True:
            with self.log_lock:
                data, done = self.logs.get(key, b""), key in self.logs_done
            if "tailLines" in request.params and not follow:  # the API server's own tail: the last N lines
                data = b"".join(io.BytesIO(data).readlines()[-int(request.params["tailLines"]) :])
            if len(data) > sent:
                await response.write(data[sent:])
                sent = len(data)
            if done or not follow:
                break
            await asyncio.sleep(0.02)
        await response.write_eof()
        return response

    def append_log(self, namespace: str, pod: str, data: bytes) -> None:
        with self.log_lock:
            self.logs[(namespace, pod)] = self.logs.get((namespace, pod), b"") + data

    def end_log(self, namespace: str, pod: str) -> None:
        with self.log_lock:
            self.logs_done.add((namespace, pod))


class KubeApi:
    """A KineticEmulator served on a loopback port from a background thread."""

    def __init__(self) -> None:
        self.emulator: KineticEmulator | None = None
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        async with KineticEmulator() as emulator, Server(emulator) as server:
            for resource, kind in RESOURCES.items():
                emulator.resources[resource] = ResourceInfo(kind=kind, namespaced=True)
            self.emulator, self.url = emulator, str(server.url).rstrip("/")
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()

    def requests(self) -> list[Any]:
        """Every request the API server received, in order (kmock's request log)."""
        assert self.emulator is not None
        return list(self.emulator)

    def put(self, resource: str, namespace: str, objects: list[dict[str, Any]]) -> None:
        """Store `objects` of `resource` (e.g. "batch/v1/jobs") as if each had been created, without a
        request each: the big namespaces of the polling tests and benchmark are filled in milliseconds."""
        assert self.emulator is not None and self._loop is not None
        emulator = self.emulator

        async def store() -> None:
            async with emulator._lock:
                for obj in objects:
                    obj["metadata"]["namespace"] = namespace
                    emulator.objects[resource, namespace, obj["metadata"]["name"]] = obj

        asyncio.run_coroutine_threadsafe(store(), self._loop).result(30)

    def start(self) -> KubeApi:
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError("kmock did not start within 15 s")
        return self

    def close(self) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@contextmanager
def kube_api() -> Iterator[KubeApi]:
    api = KubeApi().start()
    try:
        yield api
    finally:
        api.close()


def _container_status(image: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": manifests.CONTAINER,
        "image": image,
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


class Kubelet:
    """Plays the workload controllers and the kubelet for the workloads the backend created."""

    def __init__(self, api: KubeApi, clients: Any, namespace: str, workdir: Path) -> None:
        self.api, self.clients, self.namespace, self.workdir = api, clients, namespace, workdir

    # -- reading what the backend created --------------------------------------------------------------

    def job(self, name: str) -> dict[str, Any]:
        return json.loads(self.clients.batch.read_namespaced_job(name, self.namespace, _preload_content=False).data)

    def leaderworkerset(self, name: str) -> dict[str, Any]:
        return self.clients.custom.get_namespaced_custom_object(
            LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, name
        )

    # -- pods ------------------------------------------------------------------------------------------

    def create_pod(
        self, name: str, template: Mapping[str, Any], extra_labels: Mapping[str, str], status: Mapping[str, Any]
    ) -> dict[str, Any]:
        metadata = dict(template.get("metadata") or {})
        metadata.update(name=name, namespace=self.namespace, labels={**(metadata.get("labels") or {}), **extra_labels})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"], "status": status}
        self.clients.core.create_namespaced_pod(self.namespace, pod, _preload_content=False)
        return pod

    def set_pod_status(self, name: str, status: Mapping[str, Any]) -> None:
        self.clients.core.patch_namespaced_pod_status(name, self.namespace, {"status": status}, _preload_content=False)

    def add_event(self, pod: str, reason: str, message: str) -> None:
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.{reason.lower()}", "namespace": self.namespace},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": self.namespace},
            "reason": reason,
            "message": message,
            "type": "Normal",
        }
        self.clients.core.create_namespaced_event(self.namespace, event, _preload_content=False)

    # -- running containers ----------------------------------------------------------------------------

    def _env(self, pod: Mapping[str, Any], container: Mapping[str, Any], mounts: Mapping[str, Path]) -> dict[str, str]:
        labels = pod["metadata"].get("labels") or {}
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.workdir),
            "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],
        }
        for item in container.get("env") or []:
            if "value" in item:
                value = item["value"]
                for mount_path, local in mounts.items():
                    if value == mount_path or value.startswith(mount_path + "/"):
                        value = str(local) + value[len(mount_path) :]
                env[item["name"]] = value
            else:
                path = item["valueFrom"]["fieldRef"]["fieldPath"]
                label = path[len("metadata.labels['") : -2]
                env[item["name"]] = labels[label]
        return env

    def start_container(self, pod: Mapping[str, Any]) -> subprocess.Popen[bytes]:
        container = pod["spec"]["containers"][0]
        name = pod["metadata"]["name"]
        mounts = {m["mountPath"]: self.workdir / name / m["name"] for m in container.get("volumeMounts") or []}
        for local in mounts.values():
            local.mkdir(parents=True, exist_ok=True)
        command = list(container["command"])
        assert command[:2] == ["python", manifests.RUNNER_PATH], command
        argv = [sys.executable, str(RUNNER), *command[2:]]
        cwd = self.workdir / name / "cwd"
        cwd.mkdir(parents=True, exist_ok=True)
        self.set_pod_status(
            name,
            {
                "phase": "Running",
                "startTime": _now(),
                "containerStatuses": [_container_status(container["image"], {"running": {"startedAt": _now()}})],
            },
        )
        return subprocess.Popen(
            argv, cwd=cwd, env=self._env(pod, container, mounts), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )

    def finish_container(self, pod: Mapping[str, Any], process: subprocess.Popen[bytes]) -> int:
        """Stream the container's output into the pod log; record its exit in the pod status."""
        name = pod["metadata"]["name"]
        assert process.stdout is not None and self.api.emulator is not None
        for line in process.stdout:
            self.api.emulator.append_log(self.namespace, name, line)
        code = process.wait()
        self.api.emulator.end_log(self.namespace, name)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": _now()}
        self.set_pod_status(
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    _container_status(pod["spec"]["containers"][0]["image"], {"terminated": terminated})
                ],
            },
        )
        return code

    # -- workloads ---------------------------------------------------------------------------------------

    def start_job(self, name: str) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
        job = self.job(name)
        pod = self.create_pod(f"{name}-pod", job["spec"]["template"], {"job-name": name}, {"phase": "Pending"})
        self.clients.batch.patch_namespaced_job_status(
            name, self.namespace, {"status": {"active": 1, "startTime": _now()}}, _preload_content=False
        )
        return pod, self.start_container(pod)

    def finish_job(self, name: str, pod: Mapping[str, Any], process: subprocess.Popen[bytes]) -> int:
        code = self.finish_container(pod, process)
        kind, counts = ("Complete", {"succeeded": 1}) if code == 0 else ("Failed", {"failed": 1})
        reason = "Completed" if code == 0 else "BackoffLimitExceeded"
        self.clients.batch.patch_namespaced_job_status(
            name,
            self.namespace,
            {
                "status": {
                    "active": 0,
                    **counts,
                    "conditions": [
                        {"type": kind, "status": "True", "reason": reason, "message": f"pod exited with {code}"}
                    ],
                }
            },
            _preload_content=False,
        )
        return code

    def run_job(self, name: str) -> int:
        """Run a Job's single pod to completion; returns the container's exit code."""
        return self.finish_job(name, *self.start_job(name))

    def run_group(self, name: str) -> list[int]:
        """Run a LeaderWorkerSet's group: one pod per host, all at once, host 0 the leader."""
        lws = self.leaderworkerset(name)
        template = lws["spec"]["leaderWorkerTemplate"]
        pods = [
            self.create_pod(
                name if host == 0 else f"{name}-{host}",
                template["workerTemplate"],
                {manifests.LWS_WORKER_INDEX: str(host), "leaderworkerset.sigs.k8s.io/name": name},
                {"phase": "Pending"},
            )
            for host in range(template["size"])
        ]
        processes = [self.start_container(pod) for pod in pods]
        return [self.finish_container(pod, process) for pod, process in zip(pods, processes)]

    def pending_pod(self, name: str, status: Mapping[str, Any]) -> str:
        """Create the Job's pod and leave it pending with the given status (conditions, waiting states)."""
        pod_name = f"{name}-pod"
        self.create_pod(pod_name, self.job(name)["spec"]["template"], {"job-name": name}, status)
        return pod_name


# -- fixtures (imported by the test modules of this package) ----------------------------------------------

_clusters = itertools.count()


@dataclass
class Cluster:
    """One emulated GKE cluster for a test: API server, jobs bucket on fake GCS, a kubelet, a GKE profile."""

    api: KubeApi
    clients: K8sClients
    kubelet: Kubelet
    project: str
    name: str
    bucket: str
    namespace: str

    def storage(self) -> GcsStorage:
        return GcsStorage(self.bucket)

    def backend(self, kind: str = "gke", **options: Any) -> GkeBackend:
        return backend_class(kind)(self.clients, self.storage(), self.namespace, **options)


def created(c: Cluster, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The bodies of `kinds` created in this test's namespace, in order (the API server is shared by the
    module's tests)."""
    return [
        r.data
        for r in c.api.requests()
        if r.method == "POST"
        and isinstance(r.data, dict)
        and r.data.get("kind") in kinds
        and r.data["metadata"]["namespace"] == c.namespace
    ]


def created_jobs(c: Cluster) -> list[dict[str, Any]]:
    """The Jobs created in this test's namespace."""
    return created(c, ("Job",))


@pytest.fixture(scope="module")
def kube() -> Iterator[KubeApi]:
    with kube_api() as api:
        yield api


def registry_holding_every_image(project: str, region: str, cluster: str) -> Callable[[BuildInputs], ImageBuild]:
    """`serving_image.image_ensurer` for a registry that already holds every image asked for: nothing builds
    (tests/infra/test_serving_image.py builds through the Cloud Build double)."""
    return lambda inputs: ImageBuild(inputs.tag(project, region, cluster), built=False)


@pytest.fixture
def cluster(kube: KubeApi, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cluster:
    """A GKE profile (through KINETIC_* variables) whose API server is kmock, whose bucket is fake GCS and
    whose registry already holds the serving image."""
    serial = next(_clusters)  # a namespace per test: workloads of earlier tests on the shared server stay apart
    project, name, namespace = "kn-test", f"c{os.getpid()}-{serial}", f"ns-{serial}"
    for variable, value in {
        "KINETIC_K8S_HOST": kube.url,
        "KINETIC_BACKEND": "gke",
        "KINETIC_PROJECT": project,
        "KINETIC_CLUSTER": name,
        "KINETIC_NAMESPACE": namespace,
    }.items():
        monkeypatch.setenv(variable, value)
    bucket = create_bucket(gcs_emulator, jobs_bucket_name(project, name))
    monkeypatch.setattr(serving_image, "image_ensurer", registry_holding_every_image)
    clients = clients_for(resolve_infra())
    return Cluster(
        kube, clients, Kubelet(kube, clients, namespace, tmp_path / "kubelet"), project, name, bucket, namespace
    )


def wait_for_workload(kubelet: Kubelet, kind: str, timeout: float = 30.0) -> str:
    """The name of the first workload of `kind` (job / lws) to appear that this kubelet has not taken yet.
    A suspended Job is left alone until released, as the Job controller does (`spec.suspend`)."""
    taken = kubelet.__dict__.setdefault("taken", set())
    list_all = (
        (lambda: kubelet.clients.batch.list_namespaced_job(kubelet.namespace, _preload_content=False))
        if kind == "job"
        else (
            lambda: kubelet.clients.custom.list_namespaced_custom_object(
                LWS_GROUP, LWS_VERSION, kubelet.namespace, LWS_PLURAL, _preload_content=False
            )
        )
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for item in json.loads(list_all().data)["items"]:
            name = item["metadata"]["name"]
            if name not in taken and not (item.get("spec") or {}).get("suspend"):
                taken.add(name)
                return name
        time.sleep(0.01)
    raise TimeoutError(f"no new {kind} appeared within {timeout} s")


@contextmanager
def serving(kubelet: Kubelet, kind: str = "job", count: int = 1) -> Iterator[list[Any]]:
    """Run the next `count` workloads of `kind` one after another in a thread (as a one-node cluster
    would) while the block submits and waits; the yielded list receives the exit code(s)."""
    codes: list[Any] = []
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            for _ in range(count):
                name = wait_for_workload(kubelet, kind)
                codes.append(kubelet.run_job(name) if kind == "job" else kubelet.run_group(name))
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield codes
    thread.join(60)
    if errors:
        raise errors[0]
