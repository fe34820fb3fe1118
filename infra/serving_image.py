"""The serving image: what a GKE endpoint's pods run (core/backends/gke/serving.py).

It holds this kinetic-tui version as a wheel, installed with `--no-deps` over only what the instance server
imports (aiohttp, cloudpickle, and google-cloud-storage for the gs:// artifact store, at the versions the
package's own metadata requires), and runs the instance server. Its tag,
`{region}-docker.pkg.dev/{project}/kn-{cluster}/serving:{sha12}`, hashes the base image, the kinetic-tui
version and the Dockerfile template (with those pins, which come with the version), so an unchanged install
costs one registry lookup and never rebuilds; the wheel is built only when the tag is missing. The version
names the image, so it must be known: a tree that was never installed (`0+unknown`) is refused. Code edited
in an editable install keeps its version and so its tag: bump the version to rebuild.

The wheel is built from what is installed: a source tree (an editable install's) with `pip wheel` (without
build isolation, so setuptools must be importable), a regular install repacked from its dist-info RECORD.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import io
import json
import re
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.serving.pod import POD_MODULE
from kinetic_tui.infra import repository_url
from kinetic_tui.infra.container_builder import BuildInputs, ImageBuild, ImageBuildError, ensure_image
from kinetic_tui.infra.requirements import filter_requirements

DISTRIBUTION = "kinetic-tui"
BASE_IMAGE = "python:3.11-slim"
TEMPLATE_PATH = Path(__file__).with_name("Dockerfile.serving.template")
POD_PACKAGES = ("aiohttp", "cloudpickle", "google-cloud-storage")  # what the instance server imports
UNKNOWN_VERSION = "0+unknown"  # kinetic_tui.version's answer for a tree that was never installed
WHEEL_TIMEOUT = 300.0  # seconds for `pip wheel` on a source tree
# what a source tree's copy leaves out: stale build output, and what only slows the copy down
NOT_SHIPPED = (".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", ".venv", "tests")
_NOT_REPACKED = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")  # written by the installer
_WHEEL_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ServingImageInputs:
    """What the serving image is built from (a `BuildInputs`); the wheel is built only when a build needs it."""

    base_image: str
    package_version: str
    requirements: tuple[str, ...]  # the POD_PACKAGES pins, normalised
    template: str
    wheel: Callable[[], tuple[str, bytes]] = field(compare=False, repr=False)  # (file name, contents)
    label = "serving"

    def digest(self) -> str:
        document = {
            "base_image": self.base_image,
            "package_version": self.package_version,
            "requirements": list(self.requirements),
            "template_sha256": hashlib.sha256(self.template.encode()).hexdigest(),
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()

    def tag(self, project: str, region: str, cluster: str) -> str:
        return f"{repository_url(region, project, cluster)}/serving:{self.digest()[:12]}"

    def dockerfile(self) -> str:
        requirements = " ".join(shlex.quote(line) for line in self.requirements)
        return string.Template(self.template).substitute(
            base_image=self.base_image, requirements=requirements, module=POD_MODULE
        )

    def context_files(self) -> dict[str, bytes]:
        name, data = self.wheel()
        if name.split("-")[1:2] != [self.package_version.replace("-", "_")]:
            raise ImageBuildError(
                f"the wheel built is {name}, not kinetic-tui {self.package_version} as installed: reinstall "
                "the package (`pip install -e .` in a checkout) so the image's tag names what it holds"
            )
        return {"Dockerfile": self.dockerfile().encode(), name: data}


def installed() -> importlib.metadata.Distribution | None:
    try:
        return importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def serving_inputs(
    *,
    distribution: importlib.metadata.Distribution | None = None,
    version: str | None = None,
    base_image: str = BASE_IMAGE,
    template: str | None = None,
    wheel: Callable[[], tuple[str, bytes]] | None = None,
) -> ServingImageInputs:
    """The inputs for the installed kinetic-tui (`distribution`); a one-line error when its version is unknown."""
    dist = distribution if distribution is not None else installed()
    version = version if version is not None else (dist.version if dist is not None else UNKNOWN_VERSION)
    if dist is None or version in ("", "unknown", UNKNOWN_VERSION):
        raise ValidationError(
            f"the serving image is named by kinetic-tui's version, and this one has none ({version or 'empty'}): "
            "install the package (`pip install -e .` in a checkout) so its metadata records one"
        )
    return ServingImageInputs(
        base_image=base_image,
        package_version=version,
        requirements=pod_requirements(dist),
        template=template if template is not None else TEMPLATE_PATH.read_text(encoding="utf-8"),
        wheel=wheel if wheel is not None else functools.partial(build_wheel, dist),
    )


def pod_requirements(dist: importlib.metadata.Distribution) -> tuple[str, ...]:
    """The distribution's own requirements on POD_PACKAGES (extras' markers dropped), normalised."""
    found = {}
    for line in dist.requires or ():
        for requirement in filter_requirements(line.partition(";")[0]):
            name = re.split(r"[^a-z0-9-]", requirement, maxsplit=1)[0]  # filter_requirements writes PEP 503 names
            if name in POD_PACKAGES:
                found[name] = requirement
    missing = [name for name in POD_PACKAGES if name not in found]
    if missing:
        raise ImageBuildError(f"kinetic-tui's metadata requires no {', '.join(missing)}; the serving image needs it")
    return tuple(found[name] for name in POD_PACKAGES)


def build_wheel(dist: importlib.metadata.Distribution) -> tuple[str, bytes]:
    """(file name, contents) of a wheel of the installed distribution: built from its source tree when it
    has one (an editable install, or the egg-info of a checkout on the path), else repacked from the files
    its RECORD lists."""
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable") and direct.get("url", "").startswith("file:"):
        return wheel_from_source(Path(urllib.request.url2pathname(urllib.parse.urlparse(direct["url"]).path)))
    home = Path(str(dist.locate_file("")))
    if (home / "pyproject.toml").is_file():
        return wheel_from_source(home)
    return repacked_wheel(dist)


def wheel_from_source(source: Path) -> tuple[str, bytes]:
    """`pip wheel` on a copy of the tree: setuptools never prunes `build/`, so a wheel built in place can
    carry modules deleted since."""
    with tempfile.TemporaryDirectory(prefix="kinetic-wheel-") as tmp:
        copy, out = Path(tmp) / "src", Path(tmp) / "out"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(*NOT_SHIPPED))
        command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out)]
        try:
            done = subprocess.run([*command, str(copy)], capture_output=True, text=True, timeout=WHEEL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ImageBuildError(f"building kinetic-tui's wheel from {source} took over {WHEEL_TIMEOUT:g} s") from None
        wheels = sorted(out.glob("kinetic_tui-*.whl"))
        if done.returncode != 0 or not wheels:
            said = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
            raise ImageBuildError(
                f"could not build kinetic-tui's wheel from {source}: {said} (a source install builds without "
                "isolation: `pip install 'setuptools>=70.1'`)"
            )
        return wheels[0].name, wheels[0].read_bytes()


def repacked_wheel(dist: importlib.metadata.Distribution) -> tuple[str, bytes]:
    """The installed files back in a wheel, with a RECORD of their hashes; files installed outside the
    package (console scripts: pip writes them again from entry_points.txt) and bytecode stay out."""
    files = [
        path
        for path in dist.files or ()
        if not str(path).startswith("..")
        and "__pycache__" not in path.parts
        and not (path.parent.name.endswith(".dist-info") and path.name in _NOT_REPACKED)
    ]
    info = next((path.parent for path in files if path.parent.name.endswith(".dist-info")), None)
    if info is None:
        raise ImageBuildError(f"the installed kinetic-tui {dist.version} lists no dist-info files to repack")
    name = f"kinetic_tui-{dist.version.replace('-', '_')}-py3-none-any.whl"
    record, raw = [], io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files, key=str):
            data = Path(str(dist.locate_file(path))).read_bytes()
            archive.writestr(zipfile.ZipInfo(path.as_posix(), _WHEEL_DATE), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path.as_posix()},sha256={digest},{len(data)}\n")
        record.append(f"{info.as_posix()}/RECORD,,\n")
        archive.writestr(zipfile.ZipInfo(f"{info.as_posix()}/RECORD", _WHEEL_DATE), "".join(record))
    return name, raw.getvalue()


def image_ensurer(project: str, region: str, cluster: str) -> Callable[[BuildInputs], ImageBuild]:
    """Artifact Registry lookup, then Cloud Build, into the cluster's repository (tests replace this hook)."""
    return functools.partial(ensure_image, project=project, region=region, cluster=cluster)


def ensure_serving_image(
    project: str, region: str, cluster: str, inputs: ServingImageInputs | None = None
) -> ImageBuild:
    """The serving image in the cluster's repository, built unless its tag is already there."""
    return image_ensurer(project, region, cluster)(inputs if inputs is not None else serving_inputs())
