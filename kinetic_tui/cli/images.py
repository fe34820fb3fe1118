"""`kinetic-tui build-image`: the cluster's bundled image, or (Kinetic's publish mode) prebuilt base images.

Without `--repo`/`--tag` it builds the bundled image of `--accelerator` (or each `--category`) into the
cluster's Artifact Registry repository, tagged by the digest of its inputs, unless that tag exists
(cli/gke.py). With `--repo` or `--tag` it publishes, as Kinetic's `build-image` does: one base image per
category (default: all three), without the project's requirements (prebuilt mode installs them when a job
starts), always built, pushed as `{repo}:{category}-{tag}`, the name `run(container_image="prebuilt",
base_image_repo=repo)` and `KINETIC_BASE_IMAGE_REPO` resolve. `--repo` defaults to the cluster's own
repository (`.../kn-CLUSTER/base`), `--tag` to the package version. A `.pkg.dev` repository is pushed to by
the build's service account; any other is Docker Hub, logged in with the project's Secret Manager
credentials (asked for when missing; `--update-credentials` asks again). `--dockerfile` replaces the
generated Dockerfile in both modes, verbatim (its text is part of a bundled image's digest); the build
context beside it holds `requirements.txt` and `remote_runner.py`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kinetic_tui.cli.options import NEVER_ASKS, infra_options
from kinetic_tui.cli.output import CliError, guard, json_flag
from kinetic_tui.core.errors import one_line

if TYPE_CHECKING:
    from kinetic_tui.core.profiles import ResolvedInfra
    from kinetic_tui.infra.container_builder import ImageBuild

CATEGORIES = ("cpu", "gpu", "tpu")
_REPO = re.compile(r"[a-z0-9][a-z0-9._/-]*(:\d+/[a-z0-9._/-]+)?")  # lowercase, no tag, as registries name them
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")  # a Docker tag (a category prefix is added to it)


def image_publisher(infra: ResolvedInfra) -> Callable[..., ImageBuild]:
    """Cloud Build into the cluster's builds bucket: `(inputs, image, dockerhub=) -> ImageBuild`."""
    from kinetic_tui.infra.container_builder import run_build

    return partial(run_build, project=infra.project, cluster=infra.cluster)


def credentials_keeper(infra: ResolvedInfra) -> Callable[..., list[str]]:
    """Secret Manager with this machine's credentials: `(ask, update=) -> what was done`."""
    from kinetic_tui.infra.container_builder import access_token
    from kinetic_tui.infra.dockerhub import ensure_credentials

    return partial(ensure_credentials, infra.project, token=access_token())


@click.command("build-image")
@infra_options()
@click.option(
    "--requirements",
    type=click.Path(exists=True, dir_okay=False),
    help="requirements file baked into the bundled image (default: ./requirements.txt if present)",
)
@click.option("--accelerator", default="cpu", show_default=True, help="selects the bundled image's category")
@click.option(
    "--category",
    multiple=True,
    type=click.Choice(CATEGORIES),
    help="build the image of each category given (repeatable; overrides --accelerator; publishing: default all)",
)
@click.option("--repo", help="publish base images to this repository (Artifact Registry `*.pkg.dev/...` or Docker Hub)")
@click.option("--tag", help="publish base images with this version tag (default: the package version)")
@click.option(
    "--dockerfile",
    type=click.Path(exists=True, dir_okay=False),
    help="use this Dockerfile instead of the generated one",
)
@click.option("--update-credentials", is_flag=True, help="ask for the Docker Hub credentials again (Docker Hub repos)")
@NEVER_ASKS
@json_flag
def build_image(
    requirements: str | None,
    accelerator: str,
    category: tuple[str, ...],
    repo: str | None,
    tag: str | None,
    dockerfile: str | None,
    update_credentials: bool,
    as_json: bool,
) -> None:
    """Build the bundled job image (GKE profiles), or publish prebuilt base images with --repo/--tag."""
    publishing = repo is not None or tag is not None
    if publishing and requirements:
        raise click.UsageError(
            "--requirements goes into the bundled image; a published base image has none (prebuilt mode installs "
            "the requirements when a job starts): drop --requirements or --repo/--tag"
        )
    from kinetic_tui.cli.pool import gke_profile

    infra = gke_profile()
    if infra is None:
        raise CliError("build-image is for GKE profiles: the local backend runs jobs without images")
    template = _template(dockerfile)
    if publishing:
        _publish(infra, repo, tag, category or CATEGORIES, template, update_credentials, as_json)
        return
    if update_credentials:
        click.echo("note: --update-credentials has no effect: the cluster's repository needs no Docker Hub login")
    from kinetic_tui.cli import gke as cli_gke

    for chosen in category or (accelerator,):
        cli_gke.build_image(infra, requirements, chosen, as_json, template)


def _template(dockerfile: str | None) -> str | None:
    """A custom Dockerfile as the builder's template, used verbatim (`$` escaped from substitution)."""
    if dockerfile is None:
        return None
    try:
        return Path(dockerfile).read_text(encoding="utf-8").replace("$", "$$")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read Dockerfile {dockerfile}: {exc}") from None


def _publish(
    infra: ResolvedInfra,
    repo: str | None,
    tag: str | None,
    categories: tuple[str, ...],
    template: str | None,
    update_credentials: bool,
    as_json: bool,
) -> None:
    from kinetic_tui.core.submission.packaging.payload import client_fingerprint
    from kinetic_tui.infra import repository_url
    from kinetic_tui.infra.container_builder import image_inputs, prebuilt_image
    from kinetic_tui.infra.dockerhub import is_artifact_registry

    repo = repo or f"{repository_url(infra.region, infra.project, infra.cluster)}/base"
    if not _REPO.fullmatch(repo):
        raise click.UsageError(
            f"--repo {repo!r}: an image repository without a tag, like mycompany/kinetic or "
            "us-docker.pkg.dev/PROJECT/REPOSITORY/base"
        )
    tag = tag or client_fingerprint()["kinetic"]
    if not _TAG.fullmatch(tag):
        raise click.UsageError(f"--tag {tag!r}: a tag is letters, digits, '_', '.' and '-', at most 100 characters")
    dockerhub = not is_artifact_registry(repo)
    notes: list[str] = []
    if dockerhub:
        notes += guard(lambda: credentials_keeper(infra)(_ask, update=update_credentials))
    elif update_credentials:
        notes.append("--update-credentials has no effect: Artifact Registry is pushed to by the build's account")
    for note in notes if not as_json else ():
        click.echo(note)
    images, failed = [], []
    for chosen in categories:
        image = prebuilt_image(chosen, tag, repo)
        inputs = image_inputs(chosen, "", template=template)
        if not as_json:
            click.echo(f"building {image}")
        try:
            build = image_publisher(infra)(inputs, image, dockerhub=dockerhub)
        except Exception as exc:  # one category's failure does not stop the others, as in Kinetic
            failed.append(f"{chosen}: {one_line(exc)}")
            continue
        images.append({"tag": build.tag, "build_id": build.build_id, "log_url": build.log_url})
        if not as_json:
            click.echo(f"pushed {build.tag} (Cloud Build {build.build_id}, logs: {build.log_url})")
    _summary(repo, images, failed, notes, as_json)


def _ask(label: str, hidden: bool) -> str:
    value: str = click.prompt(f"{label}", hide_input=hidden, err=True)
    return value


def _summary(repo: str, images: list[dict[str, Any]], failed: list[str], notes: list[str], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"repo": repo, "images": images, "failed": failed, "notes": notes}, indent=2))
    elif images:
        click.echo(f'use them with: export KINETIC_BASE_IMAGE_REPO={repo}  (or run(base_image_repo="{repo}"))')
    if failed:
        raise CliError(f"{len(failed)} of {len(images) + len(failed)} images failed: {'; '.join(failed)}")
