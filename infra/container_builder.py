"""Job images for the GKE backend: content-addressed tags, Cloud Build builds, and the three image modes.

A bundled image is named by what went into it, `{region}-docker.pkg.dev/{project}/kn-{cluster}/base:
{category}-{sha12}`, so "is it built?" is one registry lookup and an unchanged project never rebuilds.
The hash covers the base image, the accelerator category, the kinetic version, the filtered
requirements, the runner file and the Dockerfile template (`ImageInputs.digest`).

Requirement filtering, so that only changes pip would notice change the tag, is infra/requirements.py.
Building goes through `BuildInputs` (context files and tag), which the serving image shares
(infra/serving_image.py).

google-cloud-build, google-cloud-storage and google-auth sit in the `gcp` extra and are imported only
when a build, an upload or a registry lookup really happens.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import functools
import gzip
import hashlib
import io
import json
import os
import re
import string
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kinetic_tui.core.accelerators import AcceleratorConfig, parse_accelerator
from kinetic_tui.core.accelerators import category as accelerator_category
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.submission.context import IMAGE_MODES
from kinetic_tui.core.submission.packaging import client_fingerprint
from kinetic_tui.infra import builds_bucket_name, import_extra, repository_url, service_account_email
from kinetic_tui.infra.dockerhub import dockerhub_login, dockerhub_secrets
from kinetic_tui.infra.requirements import filter_requirements

# GKE mounts the GPU driver from the node and CUDA/libtpu user-space libraries come as pip wheels, so
# one slim Python serves every category; the category still selects pip options and keys the tag.
BASE_IMAGES = {"cpu": "python:3.11-slim", "gpu": "python:3.11-slim", "tpu": "python:3.11-slim"}
PIP_OPTIONS = {"cpu": "", "gpu": "", "tpu": "-f https://storage.googleapis.com/jax-releases/libtpu_releases.html"}
# Prebuilt mode: the same Dockerfile rendered with no requirements, published per category and version.
PREBUILT_REPOSITORY = "us-docker.pkg.dev/kinetic-tui/images/base"
RUNNER_IN_IMAGE = "/kinetic/remote_runner.py"
TEMPLATE_PATH = Path(__file__).with_name("Dockerfile.template")
RUNNER_PATH = Path(__file__).resolve().parent.parent / "runner" / "remote_runner.py"
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
BUILD_TIMEOUT = 1800.0  # seconds; also the build's own server-side timeout
POLL_INTERVAL = 5.0
REGISTRY_TIMEOUT = 10.0
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
_FINISHED = frozenset({"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"})


class ImageBuildError(KineticError):
    """The image could not be checked, uploaded or built; the message names the tag and the cause."""


# ---------------------------------------------------------------------------------------------------------
# Image identity


class BuildInputs(Protocol):
    """What `ensure_image` and `run_build` build: job images (`ImageInputs`) and the serving image share one
    build path, and each says only which files its build context holds and which tag names them."""

    @property
    def label(self) -> str: ...  # Cloud Build's tag on the build: an accelerator category, or "serving"

    def tag(self, project: str, region: str, cluster: str) -> str: ...

    def context_files(self) -> dict[str, bytes]: ...


@dataclass(frozen=True)
class ImageInputs:
    """Everything an image is built from; equal inputs give the same tag, and any change a new one."""

    base_image: str
    category: str
    package_version: str
    requirements: tuple[str, ...]  # filtered
    runner: bytes
    template: str

    def digest(self) -> str:
        document = {
            "base_image": self.base_image,
            "category": self.category,
            "package_version": self.package_version,
            "requirements": list(self.requirements),
            "runner_sha256": hashlib.sha256(self.runner).hexdigest(),
            "template_sha256": hashlib.sha256(self.template.encode()).hexdigest(),
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()

    def dockerfile(self) -> str:
        return string.Template(self.template).substitute(
            base_image=self.base_image, category=self.category, pip_options=PIP_OPTIONS[self.category]
        )

    def requirements_txt(self) -> str:
        return "".join(f"{line}\n" for line in self.requirements)

    @property
    def label(self) -> str:
        return self.category

    def tag(self, project: str, region: str, cluster: str) -> str:
        return image_tag(project, region, cluster, self)

    def context_files(self) -> dict[str, bytes]:
        return {
            "Dockerfile": self.dockerfile().encode(),
            "requirements.txt": self.requirements_txt().encode(),
            "remote_runner.py": self.runner,
        }


def image_inputs(
    accelerator: AcceleratorConfig | str,
    requirements: str = "",
    *,
    base_image: str | None = None,
    package_version: str | None = None,
    runner: bytes | None = None,
    template: str | None = None,
) -> ImageInputs:
    """The inputs for this install: defaults read the shipped runner, template and package version."""
    category = _category(accelerator)
    return ImageInputs(
        base_image=base_image if base_image is not None else BASE_IMAGES[category],
        category=category,
        package_version=package_version if package_version is not None else client_fingerprint()["kinetic"],
        requirements=filter_requirements(requirements),
        runner=runner if runner is not None else RUNNER_PATH.read_bytes(),
        template=template if template is not None else TEMPLATE_PATH.read_text(encoding="utf-8"),
    )


def _category(accelerator: AcceleratorConfig | str) -> str:
    """Category of a config or accelerator string (`cpu`, `gpu` and `tpu` are accelerator strings too)."""
    return accelerator_category(parse_accelerator(accelerator) if isinstance(accelerator, str) else accelerator)


def image_tag(project: str, region: str, cluster: str, inputs: ImageInputs) -> str:
    return f"{repository_url(region, project, cluster)}/base:{inputs.category}-{inputs.digest()[:12]}"


# ---------------------------------------------------------------------------------------------------------
# Building


@dataclass(frozen=True)
class ImageBuild:
    tag: str
    built: bool  # False: the tag already existed
    build_id: str | None = None
    log_url: str | None = None


def build_context(inputs: BuildInputs) -> bytes:
    """A reproducible tar.gz (fixed mtimes and owners) of the inputs' context files."""
    files = inputs.context_files()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(files[name]), 0o644
            archive.addfile(info, io.BytesIO(files[name]))
    return gzip.compress(raw.getvalue(), mtime=0)


def ensure_image(
    inputs: BuildInputs,
    *,
    project: str,
    region: str,
    cluster: str,
    exists: Callable[[str], bool] | None = None,
    upload: Callable[[str, str, bytes], None] | None = None,
    client: Any = None,
    timeout: float = BUILD_TIMEOUT,
    poll_interval: float = POLL_INTERVAL,
) -> ImageBuild:
    """Return the image `inputs` describe (a bundled job image, the serving image), built with Cloud Build
    unless its tag exists.

    `exists(tag)` defaults to an Artifact Registry lookup, `upload(bucket, object, data)` to a GCS upload
    into the builds bucket, `client` to a REST `CloudBuildClient`; tests inject doubles for all three.
    """
    tag = inputs.tag(project, region, cluster)
    if (exists or registry_has_tag)(tag):
        return ImageBuild(tag, built=False)
    build = functools.partial(run_build, upload=upload, client=client, timeout=timeout, poll_interval=poll_interval)
    return build(inputs, tag, project=project, cluster=cluster)


def run_build(
    inputs: BuildInputs,
    tag: str,
    *,
    project: str,
    cluster: str,
    upload: Callable[[str, str, bytes], None] | None = None,
    client: Any = None,
    timeout: float = BUILD_TIMEOUT,
    poll_interval: float = POLL_INTERVAL,
    dockerhub: bool = False,
) -> ImageBuild:
    """Build `inputs` with Cloud Build, push the image as `tag` and wait for the build (`ensure_image`'s
    doubles); `dockerhub` logs in to Docker Hub first (`build_request`)."""
    cloudbuild = import_extra("google.cloud.devtools.cloudbuild_v1", "building images")
    source = build_context(inputs)
    bucket, source_object = builds_bucket_name(project, cluster), f"sources/{hashlib.sha256(source).hexdigest()}.tar.gz"
    (upload or upload_source)(bucket, source_object, source)
    build = build_request(cloudbuild, tag, inputs.label, project, cluster, bucket, source_object, timeout, dockerhub)
    client = client or cloud_build_client()
    from google.api_core.exceptions import GoogleAPICallError

    try:
        operation = client.create_build(project_id=project, build=build)
    except GoogleAPICallError as exc:
        raise ImageBuildError(f"Cloud Build refused to build {tag}: {exc.code} {_api_message(exc)}") from None
    return _wait(cloudbuild, operation, tag, timeout, poll_interval)


def build_request(
    cloudbuild: Any,
    tag: str,
    label: str,
    project: str,
    cluster: str,
    bucket: str,
    source_object: str,
    timeout: float,
    dockerhub: bool = False,
) -> Any:
    """Build then push the tag as the cluster's build service account; `images` records the digest. For
    Docker Hub (`dockerhub`) a login step comes first, with the project's Secret Manager credentials
    (infra/dockerhub.py), and `images` stays empty: Cloud Build's own push has no Docker Hub login."""
    return cloudbuild.Build(
        source=cloudbuild.Source(storage_source=cloudbuild.StorageSource(bucket=bucket, object_=source_object)),
        steps=[
            cloudbuild.BuildStep(name=DOCKER_BUILDER, args=["build", "--tag", tag, "."]),
            *([dockerhub_login(cloudbuild)] if dockerhub else []),
            cloudbuild.BuildStep(name=DOCKER_BUILDER, args=["push", tag]),
        ],
        images=[] if dockerhub else [tag],
        available_secrets=dockerhub_secrets(cloudbuild, project) if dockerhub else None,
        timeout=datetime.timedelta(seconds=int(timeout)),
        service_account=f"projects/{project}/serviceAccounts/{service_account_email(project, cluster, 'build')}",
        options=cloudbuild.BuildOptions(logging=cloudbuild.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY),
        tags=["kinetic", label],
    )


def _wait(cloudbuild: Any, operation: Any, tag: str, timeout: float, poll_interval: float) -> ImageBuild:
    from google.api_core import exceptions
    from google.api_core.future.polling import DEFAULT_POLLING

    polling = DEFAULT_POLLING.with_delay(initial=poll_interval, maximum=max(poll_interval, 30.0)).with_timeout(timeout)
    try:
        result = operation.result(polling=polling)
    except concurrent.futures.TimeoutError:
        build = operation.metadata.build
        raise ImageBuildError(
            f"Cloud Build {build.id} for {tag} did not finish within {timeout:g}s; it stops at its own "
            f"timeout, logs: {build.log_url}"
        ) from None
    except exceptions.GoogleAPICallError as exc:
        build = operation.metadata.build
        status = cloudbuild.Build.Status(build.status).name
        if status not in _FINISHED:  # the build may still be running: polling itself failed
            raise ImageBuildError(
                f"lost track of Cloud Build {build.id} for {tag}: {_api_message(exc)}; logs: {build.log_url}"
            ) from None
        raise ImageBuildError(
            f"Cloud Build {build.id} for {tag} ended {status}: {build.status_detail or _api_message(exc)}; "
            f"logs: {build.log_url}"
        ) from None
    return ImageBuild(tag, built=True, build_id=result.id, log_url=result.log_url)


def _api_message(exc: Any) -> str:
    """The service's own words on one line: REST errors prefix them with the request (`POST https://...: `)."""
    lines = re.sub(r"^[A-Z]+ \S+: ", "", exc.message).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def cloud_build_client(api_endpoint: str | None = None, credentials: Any = None) -> Any:
    """A REST-transport CloudBuildClient (REST needs no gRPC channel and works behind HTTP proxies)."""
    cloudbuild = import_extra("google.cloud.devtools.cloudbuild_v1", "building images")
    options = {"api_endpoint": api_endpoint} if api_endpoint else None
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return cloudbuild.CloudBuildClient(transport="rest", credentials=credentials, client_options=options)
    except DefaultCredentialsError:
        raise ImageBuildError(
            "no Google Cloud credentials for Cloud Build; run `gcloud auth application-default login`"
        ) from None


def upload_source(bucket: str, name: str, data: bytes) -> None:
    """Upload a build context once: its object name is its content hash, so an existing one is reused."""
    storage = import_extra("google.cloud.storage", "building images")
    from google.api_core.exceptions import GoogleAPICallError

    blob = storage.Client().bucket(bucket).blob(name)
    try:
        if not blob.exists():
            blob.upload_from_string(data, content_type="application/gzip")
    except GoogleAPICallError as exc:
        if exc.code == 404:
            message = f"the builds bucket gs://{bucket} does not exist; `kinetic-tui up` creates it"
        else:
            message = f"cannot upload the build context to gs://{bucket}/{name}: {exc.code} {_api_message(exc)}"
        raise ImageBuildError(message) from None


def registry_has_tag(
    tag: str, *, token: str | None = None, registry: str | None = None, timeout: float = REGISTRY_TIMEOUT
) -> bool:
    """HEAD the tag's manifest through the Docker Registry v2 API that Artifact Registry serves.

    `registry` replaces `https://{host}` (a test double); `token` defaults to the ADC access token.
    """
    host, _, path = tag.partition("/")
    repository, _, reference = path.rpartition(":")
    url = f"{registry or 'https://' + host}/v2/{repository}/manifests/{reference}"
    request = urllib.request.Request(
        url,
        method="HEAD",
        headers={
            "Authorization": f"Bearer {token if token is not None else access_token(timeout)}",
            "Accept": MANIFEST_TYPES,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise ImageBuildError(f"cannot check {tag} in Artifact Registry: HTTP {exc.code} {exc.reason}") from None
    except OSError as exc:
        raise ImageBuildError(f"cannot reach Artifact Registry for {tag}: {exc}") from None


def access_token(timeout: float = REGISTRY_TIMEOUT) -> str:
    """An access token from the application-default credentials (ImageBuildError naming the fix)."""
    google_auth = import_extra("google.auth", "building images")
    from google.auth.transport.requests import Request

    try:
        credentials, _ = google_auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        credentials.refresh(functools.partial(Request(), timeout=timeout))
    except google_auth.exceptions.GoogleAuthError as exc:
        raise ImageBuildError(
            f"no usable Google credentials ({exc}); run `gcloud auth application-default login`"
        ) from None
    token: str = credentials.token  # a bearer token string once refresh() succeeded
    return token


# ---------------------------------------------------------------------------------------------------------
# Image modes


@dataclass(frozen=True)
class ResolvedImage:
    mode: str
    image: str
    install_requirements: tuple[str, ...] = ()  # prebuilt mode: what the runner installs at start
    build: ImageBuild | None = None


def prebuilt_image(category: str, package_version: str | None = None, repository: str | None = None) -> str:
    """The prebuilt base image: from `repository`, else KINETIC_BASE_IMAGE_REPO, else this package's own."""
    version = package_version if package_version is not None else client_fingerprint()["kinetic"]
    repository = repository or os.environ.get("KINETIC_BASE_IMAGE_REPO") or PREBUILT_REPOSITORY
    return f"{repository}:{_category(category)}-{version}"


def resolve_image(
    mode: str,
    *,
    accelerator: AcceleratorConfig | str,
    requirements: str = "",
    container_image: str | None = None,
    base_image_repo: str | None = None,
    ensure: Callable[[ImageInputs], ImageBuild] | None = None,
    project: str | None = None,
    region: str | None = None,
    cluster: str | None = None,
) -> ResolvedImage:
    """The image a job runs in: bundled (built on demand), prebuilt (+ requirements at start) or custom.

    Bundled mode needs `ensure` or the project/region/cluster that `ensure_image` builds into.
    """
    if mode not in IMAGE_MODES:
        raise ValidationError(f"image mode {mode!r} is not one of {', '.join(IMAGE_MODES)}")
    if mode == "custom":
        if not isinstance(container_image, str) or not re.fullmatch(r"[^\s:][^\s]*", container_image):
            raise ValidationError(f"custom mode needs container_image as an image reference, not {container_image!r}")
        return ResolvedImage(mode, container_image)
    if container_image not in (None, "prebuilt", "bundled"):
        raise ValidationError(f"{mode} mode takes no container_image (got {container_image!r}); use custom mode")
    inputs = image_inputs(accelerator, requirements)
    if mode == "prebuilt":
        image = prebuilt_image(inputs.category, inputs.package_version, base_image_repo)
        return ResolvedImage(mode, image, inputs.requirements)
    if ensure is None:
        if not (project and region and cluster):
            raise ValidationError("bundled mode needs project, region and cluster (or an ensure function)")
        build = ensure_image(inputs, project=project, region=region, cluster=cluster)
    else:
        build = ensure(inputs)
    return ResolvedImage(mode, build.tag, build=build)
