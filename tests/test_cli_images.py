"""`build-image` with Kinetic's options: `--repo`/`--tag` publish prebuilt base images (Artifact Registry or
Docker Hub, whose login is kept in Secret Manager), `--dockerfile` replaces the generated Dockerfile,
`--update-credentials` asks again. Cloud Build runs through the real google-cloud-build client against the
local double of tests/infra; Secret Manager is a local double of its v1 REST API (below)."""

from __future__ import annotations

import base64
import gzip
import http.server
import io
import json
import re
import tarfile
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials

from kinetic_tui.cli import gke as cli_gke
from kinetic_tui.cli import images as cli_images
from kinetic_tui.core.submission.packaging.payload import client_fingerprint
from kinetic_tui.infra import container_builder as builder
from kinetic_tui.infra import dockerhub
from tests.infra.test_container_builder import CloudBuildDouble, _serve
from tests.test_cli_gke import CLUSTER, PROJECT, FakeStack, cli, gke, one_line_error

__all__ = ["gke"]

CLUSTER_REPO = f"us-east5-docker.pkg.dev/{PROJECT}/kn-{CLUSTER}"


class SecretManagerDouble(http.server.ThreadingHTTPServer):
    """A LOCAL TEST DOUBLE of Secret Manager's v1 REST API, not Google's service: `GET .../secrets/{id}`
    (404 when absent), `POST .../secrets?secretId=` (create) and `POST .../secrets/{id}:addVersion`. Keeps
    each secret's versions (decoded) in `versions`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SecretsHandler)
        self.versions: dict[str, list[str]] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _SecretsHandler(http.server.BaseHTTPRequestHandler):
    server: SecretManagerDouble

    def _reply(self, status: int, document: Any) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        name = self.path.rsplit("/", 1)[1]
        if name not in self.server.versions:
            return self._reply(404, {"error": {"code": 404, "message": f"Secret [{name}] not found"}})
        self._reply(200, {"name": self.path.removeprefix("/v1/")})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        created = re.fullmatch(r"/v1/projects/[^/]+/secrets\?secretId=([\w-]+)", self.path)
        added = re.fullmatch(r"/v1/projects/[^/]+/secrets/([\w-]+):addVersion", self.path)
        if created and created[1] not in self.server.versions:
            self.server.versions[created[1]] = []
            return self._reply(200, {"name": created[1], **body})
        if added and added[1] in self.server.versions:
            self.server.versions[added[1]].append(base64.b64decode(body["payload"]["data"]).decode())
            return self._reply(200, {"name": f"{added[1]}/versions/{len(self.server.versions[added[1]])}"})
        self._reply(409 if created else 404, {"error": {"message": f"refused {self.path}"}})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def secrets() -> Iterator[SecretManagerDouble]:
    server = SecretManagerDouble()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _patch(monkeypatch: pytest.MonkeyPatch, double: CloudBuildDouble, secrets_url: str, uploads: list[bytes]) -> None:
    doubles: dict[str, Any] = {
        "client": builder.cloud_build_client(api_endpoint=double.url, credentials=AnonymousCredentials()),
        "upload": lambda bucket, name, data: uploads.append(data),
        "poll_interval": 0.01,
    }
    exists = partial(builder.registry_has_tag, token="test-token", registry=double.url)

    def publisher(infra: Any) -> Callable[..., builder.ImageBuild]:
        return partial(builder.run_build, project=infra.project, cluster=infra.cluster, **doubles)

    def ensurer(infra: Any) -> Callable[[builder.ImageInputs], builder.ImageBuild]:
        where = {"project": infra.project, "region": infra.region, "cluster": infra.cluster}
        return partial(builder.ensure_image, exists=exists, **where, **doubles)

    def keeper(infra: Any) -> Callable[..., list[str]]:
        return partial(dockerhub.ensure_credentials, infra.project, token="test-token", endpoint=secrets_url)

    monkeypatch.setattr(cli_images, "image_publisher", publisher)
    monkeypatch.setattr(cli_images, "credentials_keeper", keeper)
    monkeypatch.setattr(cli_gke, "image_ensurer", ensurer)


@pytest.fixture
def cloud(gke: FakeStack, secrets: SecretManagerDouble, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Both build paths and Secret Manager pointed at the doubles; `uploads` keeps every build context."""
    uploads: list[bytes] = []
    for double in _serve():
        _patch(monkeypatch, double, secrets.url, uploads)
        yield double, secrets, uploads


def _builds(double: CloudBuildDouble) -> list[dict[str, Any]]:
    return double.of("POST", "/v1/projects")


def _dockerfile(context: bytes) -> str:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(context))) as archive:
        member = archive.extractfile("Dockerfile")
        assert member is not None
        return member.read().decode()


def test_repo_and_tag_publish_each_category_to_artifact_registry(cloud: Any) -> None:
    double, secrets, uploads = cloud
    repo = "us-docker.pkg.dev/acme-ml/images/base"
    result = cli("build-image", "--repo", repo, "--tag", "v1", "--category", "cpu", "--category", "gpu", "-y")
    assert result.exit_code == 0, result.output
    images = [f"{repo}:cpu-v1", f"{repo}:gpu-v1"]
    assert [b["images"] for b in _builds(double)] == [[images[0]], [images[1]]]
    assert [[s["args"][0] for s in b["steps"]] for b in _builds(double)] == [["build", "push"]] * 2
    assert all("availableSecrets" not in b for b in _builds(double)) and secrets.versions == {}
    assert all(f"pushed {image}" in result.output for image in images)
    assert f"export KINETIC_BASE_IMAGE_REPO={repo}" in result.output
    assert "requirements.txt" in _dockerfile(uploads[0])  # the generated Dockerfile, with no requirements
    # what prebuilt mode then runs: the same names
    assert builder.resolve_image("prebuilt", accelerator="l4", base_image_repo=repo).image.startswith(f"{repo}:gpu-")


def test_tag_alone_publishes_all_categories_into_the_cluster_repository(cloud: Any) -> None:
    double, _, _ = cloud
    result = cli("build-image", "--tag", "2026.12", "--json")
    assert result.exit_code == 0, result.output
    published = json.loads(result.output)
    expected = [f"{CLUSTER_REPO}/base:{category}-2026.12" for category in ("cpu", "gpu", "tpu")]
    assert [image["tag"] for image in published["images"]] == expected and published["failed"] == []
    assert [b["images"][0] for b in _builds(double)] == expected
    version = client_fingerprint()["kinetic"]
    default = json.loads(cli("build-image", "--repo", f"{CLUSTER_REPO}/base", "--category", "cpu", "--json").output)
    assert default["images"][0]["tag"] == f"{CLUSTER_REPO}/base:cpu-{version}"  # --tag defaults to the version


def test_a_docker_hub_repo_logs_in_with_the_secret_manager_credentials(cloud: Any) -> None:
    double, secrets, _ = cloud
    first = cli("build-image", "--repo", "me/kinetic", "--category", "cpu", input="alice\ns3cret\n")
    assert first.exit_code == 0, first.output
    assert secrets.versions == {"dockerhub-username": ["alice"], "dockerhub-token": ["s3cret"]}
    assert "s3cret" not in first.output  # the token prompt does not echo
    (build,) = _builds(double)
    assert "images" not in build  # pushed by the step after the login, not by Cloud Build itself
    login = build["steps"][1]
    assert login["secretEnv"] == ["DOCKERHUB_USERNAME", "DOCKERHUB_TOKEN"] and "docker login" in login["args"][1]
    assert build["steps"][2]["args"] == ["push", f"me/kinetic:cpu-{client_fingerprint()['kinetic']}"]
    versions = {s["env"]: s["versionName"] for s in build["availableSecrets"]["secretManager"]}
    assert versions["DOCKERHUB_TOKEN"] == f"projects/{PROJECT}/secrets/dockerhub-token/versions/latest"

    again = cli("build-image", "--repo", "me/kinetic", "--tag", "v2", "--category", "cpu", input="")
    assert again.exit_code == 0, again.output
    assert "using the existing Docker Hub access token secret dockerhub-token" in again.output
    updated = cli("build-image", "--repo", "me/kinetic", "--tag", "v3", "--update-credentials", input="bob\nnew\n")
    assert updated.exit_code == 0, updated.output
    assert secrets.versions == {"dockerhub-username": ["alice", "bob"], "dockerhub-token": ["s3cret", "new"]}


def test_dockerfile_replaces_the_generated_one_verbatim_in_both_modes(cloud: Any, tmp_path: Path) -> None:
    double, _, uploads = cloud
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text('FROM python:3.12\nENV PATH="/opt/venv/bin:$PATH"\nCOPY remote_runner.py /kinetic/\n')
    plain = json.loads(cli("build-image", "--json").output)["tag"]
    custom = cli("build-image", "--dockerfile", str(dockerfile), "--json")
    assert custom.exit_code == 0, custom.output
    assert json.loads(custom.output)["tag"] != plain  # the Dockerfile is one of the bundled image's inputs
    assert _dockerfile(uploads[-1]) == dockerfile.read_text()
    published = cli(
        "build-image", "--repo", "us-docker.pkg.dev/a/b/c", "--category", "tpu", "--dockerfile", str(dockerfile)
    )
    assert published.exit_code == 0, published.output
    assert _dockerfile(uploads[-1]) == dockerfile.read_text() and len(_builds(double)) == 3


def test_bad_publish_options_are_one_line_errors_and_build_nothing(cloud: Any, tmp_path: Path) -> None:
    double, secrets, _ = cloud
    bad_repo = cli("build-image", "--repo", "me/kinetic:latest")
    assert bad_repo.exit_code == 2 and "--repo 'me/kinetic:latest'" in bad_repo.output
    bad_tag = cli("build-image", "--tag", "v 1")
    assert bad_tag.exit_code == 2 and "--tag 'v 1'" in bad_tag.output
    (tmp_path / "requirements.txt").write_text("numpy\n")
    mixed = cli("build-image", "--repo", "me/kinetic", "--requirements", str(tmp_path / "requirements.txt"))
    assert mixed.exit_code == 2 and "a published base image has none" in mixed.output
    assert _builds(double) == [] and secrets.versions == {}
    note = cli("build-image", "--repo", "us-docker.pkg.dev/a/b/c", "--category", "cpu", "--update-credentials")
    assert note.exit_code == 0 and "--update-credentials has no effect" in note.output


def test_a_failed_category_does_not_stop_the_others_and_fails_the_command(
    cloud: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    double, _, _ = cloud
    real = cli_images.image_publisher

    def flaky(infra: Any) -> Callable[..., builder.ImageBuild]:
        publish = real(infra)

        def run(inputs: builder.ImageInputs, image: str, dockerhub: bool) -> builder.ImageBuild:
            if inputs.category == "gpu":
                raise builder.ImageBuildError(f"Cloud Build b9 for {image} ended FAILURE")
            return publish(inputs, image, dockerhub=dockerhub)

        return run

    monkeypatch.setattr(cli_images, "image_publisher", flaky)
    result = cli("build-image", "--repo", "us-docker.pkg.dev/a/b/c", "--tag", "v1")
    assert result.exit_code == 1
    assert "pushed us-docker.pkg.dev/a/b/c:cpu-v1" in result.output and "c:tpu-v1" in result.output
    assert [b["images"] for b in _builds(double)] == [
        ["us-docker.pkg.dev/a/b/c:cpu-v1"],
        ["us-docker.pkg.dev/a/b/c:tpu-v1"],
    ]
    assert (
        "1 of 3 images failed: gpu: Cloud Build b9 for us-docker.pkg.dev/a/b/c:gpu-v1 ended FAILURE"
        in one_line_error(result)
    )
