"""Image tags, Cloud Build builds and image modes.

Cloud Build is exercised through google-cloud-build's real `CloudBuildClient` (REST transport) against
`CloudBuildDouble`, a local HTTP double; build sources are uploaded with the real google-cloud-storage
client to fake-gcs-server. Nothing here talks to Google.
"""

from __future__ import annotations

import gzip
import http.server
import io
import json
import re
import sys
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.storage.gcs import MissingExtraError
from kinetic_tui.infra.container_builder import (
    PREBUILT_REPOSITORY,
    RUNNER_IN_IMAGE,
    RUNNER_PATH,
    TEMPLATE_PATH,
    ImageBuild,
    ImageBuildError,
    ImageInputs,
    build_context,
    cloud_build_client,
    ensure_image,
    filter_requirements,
    image_inputs,
    image_tag,
    registry_has_tag,
    resolve_image,
)
from tests.gcs_emulator import create_bucket

PROJECT, REGION, CLUSTER = "acme-ml", "us-central1", "train"
DOCKER = "gcr.io/cloud-builders/docker"
TARGET = {"project": PROJECT, "region": REGION, "cluster": CLUSTER}
REQUIREMENTS = "numpy>=1.26\ntorch==2.4.0\n"
BASE = ImageInputs(
    "python:3.11-slim", "gpu", "0.1.0", filter_requirements(REQUIREMENTS), b"print('runner')\n", "FROM ${base_image}\n"
)


# ---------------------------------------------------------------------------------------------------------
# Requirement filtering and tags


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# pinned\n\nnumpy >= 1.26   # needed\n", ("numpy>=1.26",)),
        ("Scikit_Learn==1.5\n", ("scikit-learn==1.5",)),
        ("numpy >= 1, < 2\nnumpy<2,>=1\n", ("numpy<2,>=1",)),
        ("jax[TPU, cuda12]>=0.4\n", ("jax[cuda12,tpu]>=0.4",)),
        (
            'numpy; python_version  <  "3.12"  and sys_platform=="linux"\n',
            ('numpy; python_version < "3.12" and sys_platform=="linux"',),
        ),
        (
            "mypkg@  https://example.com/m-1.0.tar.gz#sha256=ab\n",
            ("mypkg @ https://example.com/m-1.0.tar.gz#sha256=ab",),
        ),
        ("-e .\n./libs/local\n../sibling\n/abs/pkg\nfile:///tmp/x.whl\nrequests\n", ("requests",)),
        ("kinetic-tui>=0.1\nKinetic_TUI\nrich\n", ("rich",)),
        (
            "--extra-index-url   https://download.pytorch.org/whl/cu121\ntorch\n",
            ("--extra-index-url https://download.pytorch.org/whl/cu121", "torch"),
        ),
        ("numpy \\\n  >=1.26\n", ("numpy>=1.26",)),
        ("six==1.16 --hash=sha256:bb  --hash=sha256:aa\n", ("six==1.16 --hash=sha256:aa --hash=sha256:bb",)),
        ("", ()),
    ],
)
def test_filter_requirements(text, expected):
    assert filter_requirements(text) == expected


@pytest.mark.parametrize("line", ["-r base.txt", "--requirement=base.txt", "-c constraints.txt"])
def test_included_files_are_refused_with_the_line(line):
    with pytest.raises(ValidationError, match=f"requirements line 2 '{re.escape(line)}' includes another file"):
        filter_requirements(f"numpy\n{line}\n")


def test_tag_format():
    tag = image_tag(PROJECT, REGION, CLUSTER, BASE)
    assert re.fullmatch(r"us-central1-docker\.pkg\.dev/acme-ml/kn-train/base:gpu-[0-9a-f]{12}", tag)
    assert tag.endswith(BASE.digest()[:12])


VARIANTS = {
    "base image": replace(BASE, base_image="python:3.12-slim"),
    "category": replace(BASE, category="tpu"),
    "package version": replace(BASE, package_version="0.2.0"),
    "requirements": replace(BASE, requirements=filter_requirements(REQUIREMENTS + "pandas\n")),
    "requirement pin": replace(BASE, requirements=filter_requirements("numpy>=1.27\ntorch==2.4.0\n")),
    "runner": replace(BASE, runner=b"print('runner v2')\n"),
    "template": replace(BASE, template="FROM ${base_image}\nRUN true\n"),
}


@pytest.mark.parametrize("changed", sorted(VARIANTS))
def test_any_changed_input_changes_the_tag(changed):
    tags = {name: image_tag(PROJECT, REGION, CLUSTER, inputs) for name, inputs in VARIANTS.items()}
    assert tags[changed] != image_tag(PROJECT, REGION, CLUSTER, BASE)
    assert list(tags.values()).count(tags[changed]) == 1


def test_unchanged_inputs_keep_the_tag():
    again = ImageInputs(
        BASE.base_image,
        BASE.category,
        BASE.package_version,
        filter_requirements("# reordered\ntorch == 2.4.0\n\n  numpy>=1.26  # comment\n"),
        bytes(BASE.runner),
        str(BASE.template),
    )
    assert image_tag(PROJECT, REGION, CLUSTER, again) == image_tag(PROJECT, REGION, CLUSTER, BASE)


REQUIREMENT_POOL = [
    "numpy>=1.26",
    "torch==2.4.0",
    "pandas",
    "jax[tpu]>=0.4.30",
    "requests<3,>=2",
    'tomli; python_version < "3.11"',
]


@st.composite
def noisy_requirements(draw: st.DrawFn) -> tuple[list[str], str]:
    """A subset of the pool, reordered and reformatted with comments, blank lines and extra spaces."""
    chosen = draw(st.lists(st.sampled_from(REQUIREMENT_POOL), min_size=1, unique=True))
    lines = []
    for requirement in draw(st.permutations(chosen)):
        spaced = requirement.replace(">=", draw(st.sampled_from([">=", " >= ", ">=  "]))).replace(",", ", ")
        lines += draw(st.lists(st.sampled_from(["", "   ", "# a comment", "#"]), max_size=2))
        lines.append(draw(st.sampled_from(["", "  ", "\t"])) + spaced + draw(st.sampled_from(["", "  # why", " "])))
    return chosen, "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n# end\n"]))


@settings(max_examples=60)
@given(noisy_requirements())
def test_requirement_noise_never_changes_the_tag(sample):
    chosen, text = sample
    clean = image_inputs("tpu", "\n".join(chosen), runner=b"r", template="t", package_version="1")
    noisy = image_inputs("tpu", text, runner=b"r", template="t", package_version="1")
    assert image_tag(PROJECT, REGION, CLUSTER, noisy) == image_tag(PROJECT, REGION, CLUSTER, clean)
    more = image_inputs("tpu", text + "\nextra-package\n", runner=b"r", template="t", package_version="1")
    assert image_tag(PROJECT, REGION, CLUSTER, more) != image_tag(PROJECT, REGION, CLUSTER, clean)


def test_default_inputs_read_the_shipped_runner_and_template():
    inputs = image_inputs(parse_accelerator("v5litepod-2x2"), REQUIREMENTS)
    assert inputs.category == "tpu" and inputs.base_image == "python:3.11-slim"
    assert inputs.runner == RUNNER_PATH.read_bytes() and inputs.template == TEMPLATE_PATH.read_text()
    assert inputs.package_version == "0.1.0"
    dockerfile = inputs.dockerfile()
    assert dockerfile.count("FROM python:3.11-slim") == 1 and "KINETIC_ACCELERATOR_CATEGORY=tpu" in dockerfile
    assert "libtpu_releases.html -r /kinetic/requirements.txt" in dockerfile and "${" not in dockerfile
    assert f"COPY remote_runner.py {RUNNER_IN_IMAGE}\n" in dockerfile


def test_unknown_accelerator_is_refused():
    with pytest.raises(ValidationError, match="invalid accelerator 'fpga'"):
        image_inputs("fpga")


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_build_context_is_reproducible():
    first, second = build_context(BASE), build_context(replace(BASE))
    assert first == second
    assert _members(first) == {
        "Dockerfile": b"FROM python:3.11-slim\n",
        "remote_runner.py": b"print('runner')\n",
        "requirements.txt": b"numpy>=1.26\ntorch==2.4.0\n",
    }


# ---------------------------------------------------------------------------------------------------------
# The Cloud Build double


class CloudBuildDouble(http.server.ThreadingHTTPServer):
    """A LOCAL TEST DOUBLE of the Cloud Build v1 REST API, not Google's service.

    It implements only what `ensure_image` uses: `POST /v1/projects/{p}/builds` (CreateBuild, answered
    with a long-running Operation) and `GET /v1/operations/build/{p}/{id}` (GetOperation), which reports
    WORKING until `polls_until_done` polls, then SUCCESS, or FAILURE the way Cloud Build does (an
    operation error plus a FAILURE build in the metadata); `outcome="never"` never finishes. `refuse`
    answers CreateBuild 403 PERMISSION_DENIED; `forget` answers every GetOperation 404. It also
    answers Artifact Registry's Docker Registry v2 `HEAD /v2/{repo}/manifests/{tag}` from `existing`
    (403 for the bearer token `denied`); with `pushes` a successful build's `images` join `existing`, as
    the registry then holds them.
    Every request is recorded as (method, path, headers, JSON body).
    """

    def __init__(
        self,
        outcome: str = "SUCCESS",
        polls_until_done: int = 2,
        existing: set[str] = frozenset(),
        refuse: bool = False,
        forget: bool = False,
        pushes: bool = False,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _DoubleHandler)
        self.outcome, self.polls_until_done, self.existing = outcome, polls_until_done, set(existing)
        self.refuse, self.forget, self.pushes = refuse, forget, pushes
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.builds: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def of(self, method: str, prefix: str) -> list[Any]:
        return [body for m, path, _, body in self.requests if m == method and path.startswith(prefix)]

    def operation(self, name: str) -> dict[str, Any]:
        build_id = name.rsplit("/", 1)[1]
        self.polls[name] = self.polls.get(name, 0) + 1
        done = self.outcome != "never" and self.polls[name] >= self.polls_until_done
        build = dict(self.builds[build_id], status="WORKING")
        operation: dict[str, Any] = {
            "name": name,
            "done": done,
            "metadata": {
                "@type": "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata",
                "build": build,
            },
        }
        if done and self.outcome == "SUCCESS":
            build["status"] = "SUCCESS"
            images = [
                {"name": image, "digest": "sha256:" + "0" * 64} for image in build.get("images", [])
            ]  # none: pushed by a step
            build["results"] = {"images": images}
            if self.pushes:
                self.existing.update(image.split("/", 1)[1] for image in build.get("images", []))
            operation["response"] = {"@type": "type.googleapis.com/google.devtools.cloudbuild.v1.Build", **build}
        elif done:
            build["status"] = "FAILURE"
            build["statusDetail"] = f'Build step 0 "{DOCKER}" failed: step exited with non-zero status: 1'
            operation["error"] = {"code": 2, "message": "Build failed; check build logs for details"}
        return operation


class _DoubleHandler(http.server.BaseHTTPRequestHandler):
    server: CloudBuildDouble

    def _record(self, body: Any) -> str:
        path = self.path.split("?", 1)[0]
        self.server.requests.append((self.command, path, dict(self.headers), body))
        return path

    def _reply(self, status: int, document: Any = None) -> None:
        data = json.dumps(document).encode() if document is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        path = self._record(body)
        match = re.fullmatch(r"/v1/projects/([^/]+)/builds", path)
        if match is None:
            return self._reply(404, {"error": {"code": 404, "message": f"no route {path}"}})
        if self.server.refuse:
            return self._reply(
                403,
                {
                    "error": {
                        "code": 403,
                        "status": "PERMISSION_DENIED",
                        "message": "Cloud Build API has not been used in project acme-ml",
                    }
                },
            )
        build_id = f"b{len(self.server.builds) + 1}"
        self.server.builds[build_id] = dict(
            body,
            id=build_id,
            projectId=match[1],
            logUrl=f"https://console.cloud.google.com/cloud-build/builds/{build_id}",
        )
        name = f"operations/build/{match[1]}/{build_id}"
        self.server.polls[name] = 0
        operation = self.server.operation(name)
        self._reply(200, dict(operation, done=False))

    def do_GET(self) -> None:
        path = self._record(None)
        name = path.removeprefix("/v1/")
        if name not in self.server.polls or self.server.forget:
            return self._reply(404, {"error": {"code": 404, "message": f"no operation {name}"}})
        self._reply(200, self.server.operation(name))

    def do_HEAD(self) -> None:
        path = self._record(None)
        repository, _, reference = path.removeprefix("/v2/").partition("/manifests/")
        if self.headers.get("Authorization") == "Bearer denied":
            return self._reply(403)
        self._reply(200 if f"{repository}:{reference}" in self.server.existing else 404)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(**kwargs: Any) -> Iterator[CloudBuildDouble]:
    server = CloudBuildDouble(**kwargs)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def double(request) -> Iterator[CloudBuildDouble]:
    yield from _serve(**getattr(request, "param", {}))


def _build(double: CloudBuildDouble, inputs: ImageInputs = BASE, **overrides: Any) -> ImageBuild:
    """`ensure_image` wired to the double: registry lookups and the REST client both point at it."""
    options = {
        "exists": partial(registry_has_tag, token="test-token", registry=double.url),
        "upload": lambda bucket, name, data: double.requests.append(("UPLOAD", f"{bucket}/{name}", {}, data)),
        "client": cloud_build_client(api_endpoint=double.url, credentials=AnonymousCredentials()),
        "poll_interval": 0.01,
        **overrides,
    }
    return ensure_image(inputs, **{**TARGET, **options})


def _repository_path(tag: str) -> str:
    return tag.split("/", 1)[1]


def test_an_existing_tag_skips_the_build(double):
    tag = image_tag(PROJECT, REGION, CLUSTER, BASE)
    double.existing.add(_repository_path(tag))
    assert _build(double) == ImageBuild(tag, built=False)
    manifest = f"/v2/acme-ml/kn-train/base/manifests/{tag.rsplit(':', 1)[1]}"
    assert [(method, path) for method, path, _, _ in double.requests] == [("HEAD", manifest)]
    assert double.requests[0][2]["Authorization"] == "Bearer test-token"


def test_a_missing_tag_is_built_once_and_polled_to_done(double):
    tag = image_tag(PROJECT, REGION, CLUSTER, BASE)
    result = _build(double)
    assert result.built and result.tag == tag and result.build_id == "b1"
    [create] = double.of("POST", "/v1/projects/acme-ml/builds")
    assert [(step["name"], step["args"]) for step in create["steps"]] == [
        ("gcr.io/cloud-builders/docker", ["build", "--tag", tag, "."]),
        ("gcr.io/cloud-builders/docker", ["push", tag]),
    ]
    assert create["images"] == [tag] and create["timeout"] == "1800s"
    assert create["serviceAccount"] == "projects/acme-ml/serviceAccounts/kn-train-build@acme-ml.iam.gserviceaccount.com"
    [(_, uploaded, _, data)] = [r for r in double.requests if r[0] == "UPLOAD"]
    assert create["source"]["storageSource"] == dict(zip(("bucket", "object"), uploaded.split("/", 1)))
    assert uploaded.startswith("acme-ml-kn-train-builds/sources/") and data == build_context(BASE)
    assert double.polls == {"operations/build/acme-ml/b1": 2}  # polled until the double said done


@pytest.mark.parametrize("double", [{"outcome": "FAILURE"}], indirect=True)
def test_a_failed_build_surfaces_its_status_detail(double):
    with pytest.raises(ImageBuildError) as info:
        _build(double)
    message = str(info.value)
    assert message.startswith(f"Cloud Build b1 for {image_tag(PROJECT, REGION, CLUSTER, BASE)} ended FAILURE: ")
    assert (
        "step exited with non-zero status: 1; logs: https://console.cloud.google.com/cloud-build/builds/b1" in message
    )


@pytest.mark.parametrize("double", [{"outcome": "never"}], indirect=True)
def test_a_build_that_never_finishes_times_out(double):
    with pytest.raises(ImageBuildError, match=r"Cloud Build b1 for .* did not finish within 0.3s"):
        _build(double, timeout=0.3)
    assert len(double.of("POST", "/v1/")) == 1


@pytest.mark.parametrize("double", [{"refuse": True}], indirect=True)
def test_a_refused_build_request_names_the_cause(double):
    refused = r"Cloud Build refused to build .*base:gpu-\w{12}: 403 Cloud Build API has not been used"
    with pytest.raises(ImageBuildError, match=refused):
        _build(double)


@pytest.mark.parametrize("double", [{"forget": True}], indirect=True)
def test_losing_the_operation_is_not_reported_as_a_build_failure(double):
    lost = r"lost track of Cloud Build b1 for .*: no operation operations/build/acme-ml/b1"
    with pytest.raises(ImageBuildError, match=lost):
        _build(double)


def test_registry_errors_other_than_404_are_reported(double):
    with pytest.raises(ImageBuildError, match=r"cannot check .*base:x in Artifact Registry: HTTP 403"):
        registry_has_tag("us-docker.pkg.dev/p/r/base:x", token="denied", registry=double.url)
    closed = double.url.rsplit(":", 1)[0] + ":9"
    with pytest.raises(ImageBuildError, match="cannot reach Artifact Registry for us-docker.pkg.dev/p/r/base:x"):
        registry_has_tag("us-docker.pkg.dev/p/r/base:x", token="t", registry=closed, timeout=1)


def test_build_sources_upload_to_gcs(double, gcs_emulator):
    create_bucket(gcs_emulator, f"{PROJECT}-kn-{CLUSTER}-builds")
    inputs = replace(BASE, runner=b"print('uploaded')\n")
    assert _build(double, inputs, upload=None).built  # upload=None: the real google-cloud-storage uploader
    [create] = double.of("POST", "/v1/")
    source = create["source"]["storageSource"]
    blob = storage.Client().bucket(source["bucket"]).blob(source["object"])
    assert _members(blob.download_as_bytes())["remote_runner.py"] == b"print('uploaded')\n"


def test_upload_to_a_missing_builds_bucket_says_how_to_create_it(double, gcs_emulator):
    with pytest.raises(ImageBuildError) as info:
        _build(double, upload=None, cluster="nobucket")
    assert (
        str(info.value)
        == "the builds bucket gs://acme-ml-kn-nobucket-builds does not exist; `kinetic-tui up` creates it"
    )
    assert double.of("POST", "/v1/") == []


def test_missing_cloud_build_sdk_names_the_extra(double, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.cloud.devtools.cloudbuild_v1", None)
    with pytest.raises(MissingExtraError, match=r"building images needs .*: pip install 'kinetic-tui\[gcp\]'"):
        _build(double, client=None)
    assert double.of("POST", "/v1/") == []


# ---------------------------------------------------------------------------------------------------------
# Image modes


def test_bundled_mode_builds_through_ensure():
    seen: list[ImageInputs] = []

    def ensure(inputs: ImageInputs) -> ImageBuild:
        seen.append(inputs)
        return ImageBuild("registry/base:gpu-abc", built=True, build_id="b9")

    resolved = resolve_image("bundled", accelerator="l4x2", requirements="torch\n# c\n", ensure=ensure)
    assert resolved.image == "registry/base:gpu-abc" and resolved.build.build_id == "b9"
    assert resolved.install_requirements == () and [i.requirements for i in seen] == [("torch",)]


def test_bundled_mode_against_the_double(double):
    client = cloud_build_client(api_endpoint=double.url, credentials=AnonymousCredentials())
    ensure = partial(
        ensure_image,
        **TARGET,
        exists=partial(registry_has_tag, token="t", registry=double.url),
        upload=lambda *_: None,
        client=client,
        poll_interval=0.01,
    )
    resolved = resolve_image("bundled", accelerator=parse_accelerator("cpu"), ensure=ensure)
    assert resolved.image.startswith("us-central1-docker.pkg.dev/acme-ml/kn-train/base:cpu-")
    assert resolved.build.built and len(double.of("POST", "/v1/")) == 1


def test_prebuilt_mode_installs_requirements_at_start():
    def ensure(inputs: ImageInputs) -> ImageBuild:
        raise AssertionError("prebuilt mode must not build")

    resolved = resolve_image(
        "prebuilt",
        accelerator="v5litepod-2x2",
        requirements="Jax[TPU]\n\n# x\n",
        container_image="prebuilt",
        ensure=ensure,
    )
    assert resolved.image == f"{PREBUILT_REPOSITORY}:tpu-0.1.0"
    assert resolved.install_requirements == ("jax[tpu]",) and resolved.build is None


def test_custom_images_are_used_as_given():
    resolved = resolve_image(
        "custom", accelerator="cpu", requirements="numpy\n", container_image="ghcr.io/me/trainer:2024-05"
    )
    assert (resolved.image, resolved.install_requirements, resolved.build) == ("ghcr.io/me/trainer:2024-05", (), None)


@pytest.mark.parametrize(
    ("mode", "kwargs", "message"),
    [
        ("docker", {}, "image mode 'docker' is not one of bundled, prebuilt, custom"),
        ("custom", {}, "custom mode needs container_image as an image reference, not None"),
        ("custom", {"container_image": "has space"}, "not 'has space'"),
        ("bundled", {"container_image": "ghcr.io/x"}, "bundled mode takes no container_image"),
        ("bundled", {}, "bundled mode needs project, region and cluster"),
    ],
)
def test_bad_modes_are_refused(mode, kwargs, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        resolve_image(mode, accelerator="cpu", **kwargs)
