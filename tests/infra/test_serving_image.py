"""The serving image a GKE endpoint's pods run: its tag names what went into it, its Dockerfile installs the
package's wheel with --no-deps and runs the instance server, the wheel is this install's, and deploying an
endpoint looks the image up and builds it only when the registry lacks it.

Builds go through google-cloud-build's real REST client against the Cloud Build double of
test_container_builder.py (which also answers the registry lookups), and endpoints deploy on kmock.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.metadata
import io
import json
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from google.auth.credentials import AnonymousCredentials

from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.profiles import resolve_infra
from kinetic_tui.core.serving.config import EndpointConfig
from kinetic_tui.core.serving.pod import POD_MODULE
from kinetic_tui.infra import serving_image
from kinetic_tui.infra.container_builder import (
    ImageBuildError,
    build_context,
    cloud_build_client,
    ensure_image,
    registry_has_tag,
)
from kinetic_tui.infra.serving_image import ServingImageInputs, serving_inputs
from tests.gke.kubelet import Cluster, cluster, created, kube
from tests.infra.test_container_builder import CloudBuildDouble, _serve

__all__ = ["cluster", "kube"]  # the fixtures this module uses from the kubelet double

ROOT = Path(__file__).resolve().parents[2]
PROJECT, REGION, CLUSTER = "acme-ml", "us-central1", "serve"
VERSION = importlib.metadata.version("kinetic-tui")
CONFIG = EndpointConfig("fraud-web", "fraud", min_instances=1, max_instances=3, target_per_instance=4, port=8000)
ROUTES = {"endpoint": "fraud-web", "group": "fraud", "production": None, "versions": {}}


def fake_wheel(version: str = VERSION) -> tuple[str, bytes]:
    return f"kinetic_tui-{version}-py3-none-any.whl", b"PK not really a wheel"


def inputs(**changes: Any) -> ServingImageInputs:
    return serving_inputs(**{"wheel": fake_wheel, **changes})


def tag(built: ServingImageInputs) -> str:
    return built.tag(PROJECT, REGION, CLUSTER)


# -- the tag and the Dockerfile ------------------------------------------------------------------------------


def test_the_tag_is_stable_and_names_the_clusters_serving_repository() -> None:
    first, again = tag(inputs()), tag(inputs())
    assert first == again == tag(inputs(wheel=lambda: fake_wheel("9.9")))  # the wheel is not hashed: it is built later
    assert first.startswith(f"{REGION}-docker.pkg.dev/{PROJECT}/kn-{CLUSTER}/serving:")
    assert len(first.rsplit(":", 1)[1]) == 12


@pytest.mark.parametrize(
    "changes",
    [{"version": "0.2.0"}, {"template": "FROM ${base_image}\n"}, {"base_image": "python:3.12-slim"}],
    ids=["version", "template", "base image"],
)
def test_the_tag_changes_with_the_version_the_template_or_the_base(changes: dict[str, Any]) -> None:
    assert tag(inputs(**changes)) != tag(inputs())


@pytest.mark.parametrize("version", ["0+unknown", ""])
def test_an_unknown_version_is_refused_in_one_line(version: str) -> None:
    with pytest.raises(ValidationError, match=r"named by kinetic-tui's version, and this one has none") as error:
        inputs(version=version)
    assert "\n" not in str(error.value) and "pip install -e ." in str(error.value)


def test_an_uninstalled_package_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving_image, "installed", lambda: None)
    with pytest.raises(ValidationError, match=r"this one has none \(0\+unknown\)"):
        serving_inputs()


def test_the_dockerfile_installs_the_pins_then_the_wheel_without_deps_and_runs_the_instance() -> None:
    dockerfile = inputs().dockerfile()
    lines = [line for line in dockerfile.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert "RUN python -m pip install 'aiohttp>=3.9' 'cloudpickle>=3.0' 'google-cloud-storage<4,>=3'" in lines
    assert "COPY kinetic_tui-*.whl /kinetic/" in lines
    assert "RUN python -m pip install --no-deps /kinetic/kinetic_tui-*.whl" in lines
    assert lines[-1] == f'CMD ["python", "-m", "{POD_MODULE}"]'
    assert lines.index("RUN python -m pip install --no-deps /kinetic/kinetic_tui-*.whl") < len(lines) - 1


def test_the_pins_are_the_ones_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {line.replace(" ", "") for line in [*project["dependencies"], *project["optional-dependencies"]["gcp"]]}
    for pin in inputs().requirements:  # normalised: specifiers sorted
        name = pin.split(">")[0].split("<")[0]
        (same,) = [line for line in declared if line.startswith(name) and line[len(name)] in "<>="]
        assert sorted(same[len(name) :].split(",")) == sorted(pin[len(name) :].split(","))


def test_the_build_context_holds_the_dockerfile_and_the_wheel_of_the_installed_version() -> None:
    built = inputs()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(build_context(built)))) as archive:
        names = archive.getnames()
        dockerfile = archive.extractfile("Dockerfile").read().decode()  # type: ignore[union-attr]
    assert names == ["Dockerfile", f"kinetic_tui-{VERSION}-py3-none-any.whl"]
    assert dockerfile == built.dockerfile()
    stale = inputs(wheel=lambda: fake_wheel("0.0.1"))
    with pytest.raises(
        ImageBuildError, match=f"the wheel built is kinetic_tui-0.0.1-py3-none-any.whl, not kinetic-tui {VERSION}"
    ):
        stale.context_files()


# -- the wheel -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def source_wheel() -> tuple[str, bytes]:
    """The wheel of this (editable) install, built once from its source tree."""
    return serving_image.build_wheel(importlib.metadata.distribution("kinetic-tui"))


def test_the_wheel_of_an_editable_install_is_built_from_its_source(source_wheel: tuple[str, bytes]) -> None:
    name, data = source_wheel
    assert name == f"kinetic_tui-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        files = archive.namelist()
        metadata = archive.read(f"kinetic_tui-{VERSION}.dist-info/METADATA").decode()
    assert "kinetic_tui/core/serving/pod.py" in files and "kinetic_tui/infra/Dockerfile.serving.template" in files
    assert f"\nVersion: {VERSION}\n" in metadata
    assert not any(path.startswith(("tests/", "core/")) for path in files)


def test_a_regular_install_is_repacked_from_its_record(source_wheel: tuple[str, bytes], tmp_path: Path) -> None:
    name, data = source_wheel
    wheel = tmp_path / name
    wheel.write_bytes(data)
    target = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(tmp_path / name),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (dist,) = importlib.metadata.distributions(path=[str(target)])
    repacked_name, repacked = serving_image.build_wheel(dist)
    assert repacked_name == name
    with zipfile.ZipFile(io.BytesIO(data)) as original, zipfile.ZipFile(io.BytesIO(repacked)) as again:
        assert set(again.namelist()) == set(original.namelist())
        for path in original.namelist():
            if not path.endswith("/RECORD"):
                assert again.read(path) == original.read(path), path
        record = again.read(f"kinetic_tui-{VERSION}.dist-info/RECORD").decode()
    assert "kinetic_tui/core/serving/pod.py,sha256=" in record


# -- deploying an endpoint on kmock through the Cloud Build double -------------------------------------------


@pytest.fixture
def cloud_build(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[CloudBuildDouble]:
    """The serving image's lookups and builds pointed at the double, which keeps what it built; the wheel is
    a stand-in (the tests above build the real one)."""
    wheels: list[str] = []

    def wheel(dist: Any) -> tuple[str, bytes]:
        wheels.append(dist.version)
        return fake_wheel(dist.version)

    for double in _serve(pushes=True):
        uploads: list[bytes] = []
        monkeypatch.setattr(serving_image, "image_ensurer", partial(_ensurer, double, uploads))
        monkeypatch.setattr(serving_image, "build_wheel", wheel)
        double.uploads, double.wheels = uploads, wheels  # type: ignore[attr-defined]
        yield double


def _ensurer(double: CloudBuildDouble, uploads: list[bytes], project: str, region: str, name: str) -> Any:
    """`serving_image.image_ensurer` against the double; build contexts land in `uploads`."""
    return partial(
        ensure_image,
        project=project,
        region=region,
        cluster=name,
        exists=partial(registry_has_tag, token="test-token", registry=double.url),
        upload=lambda bucket, key, data: uploads.append(data),
        client=cloud_build_client(api_endpoint=double.url, credentials=AnonymousCredentials()),
        poll_interval=0.01,
    )


def _pod_image(c: Cluster) -> str:
    answer = c.clients.apps.read_namespaced_deployment("fraud-web", c.namespace, _preload_content=False)
    deployment = json.loads(answer.data)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_a_deploy_builds_the_serving_image_once_and_the_pods_run_it(
    cluster: Cluster, cloud_build: CloudBuildDouble
) -> None:
    infra = resolve_infra()
    backend = backend_for(infra)
    expected = serving_inputs().tag(infra.project, infra.region, infra.cluster)

    backend.deploy_endpoint(CONFIG, ROUTES)
    builds = cloud_build.of("POST", "/v1/projects")
    assert len(builds) == 1 and builds[0]["images"] == [expected] and builds[0]["tags"] == ["kinetic", "serving"]
    assert cloud_build.wheels == [VERSION]  # type: ignore[attr-defined]
    (upload,) = cloud_build.uploads  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(upload))) as archive:
        assert sorted(archive.getnames()) == ["Dockerfile", f"kinetic_tui-{VERSION}-py3-none-any.whl"]
    assert _pod_image(cluster) == expected
    (deployment,) = created(cluster, ("Deployment",))
    for version in ("1.37.0", "1.33.0"):
        kubernetes_validate.validate(deployment, version, strict=True)

    backend.deploy_endpoint(CONFIG.replace(max_instances=5), ROUTES)  # a second deploy: the registry has it
    assert len(cloud_build.of("POST", "/v1/projects")) == 1 and cloud_build.wheels == [VERSION]  # type: ignore[attr-defined]
    assert len(cloud_build.of("HEAD", "/v2/")) == 2
    assert _pod_image(cluster) == expected


@pytest.mark.parametrize(
    ("changes", "says"),
    [({"max_instances": 0}, "max_instances"), ({"scale_in_cooldown": 4000}, "at most 3600 s")],
)
def test_bad_config_is_refused_before_the_image_is_looked_up(
    cluster: Cluster, cloud_build: CloudBuildDouble, changes: dict[str, Any], says: str
) -> None:
    before = len(cluster.api.requests())
    with pytest.raises(ValidationError, match=says) as error:
        backend_for(resolve_infra()).deploy_endpoint(dataclasses.replace(CONFIG, **changes), ROUTES)
    assert "\n" not in str(error.value)
    assert cloud_build.requests == [] and len(cluster.api.requests()) == before
