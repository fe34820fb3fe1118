"""Docker Hub as an image target (`build-image --repo NAME` without `.pkg.dev`), as Kinetic does it.

The login a build pushes with lives in the project's Secret Manager under Kinetic's names
(`dockerhub-username`, `dockerhub-token`), so a project set up by either tool works with the other. The
build reads them as secret env (`dockerhub_login`, `dockerhub_secrets`); `ensure_credentials` creates them,
asking for the values when a secret is missing or `update` is set. Secret Manager is reached through its v1
REST API with the caller's access token (no extra SDK); tests point `endpoint` at a double.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from kinetic_tui.core.errors import KineticError

DOCKERHUB_SECRETS = {"DOCKERHUB_USERNAME": "dockerhub-username", "DOCKERHUB_TOKEN": "dockerhub-token"}
SECRET_MANAGER = "https://secretmanager.googleapis.com"
TIMEOUT = 10.0


class CredentialsError(KineticError):
    """Secret Manager refused a lookup or a write; the message names the secret and the status."""


def is_artifact_registry(repo: str) -> bool:
    """Kinetic's rule: a repository on a `*.pkg.dev` host is Artifact Registry, anything else Docker Hub."""
    return repo.split("/", 1)[0].endswith(".pkg.dev")


def dockerhub_login(cloudbuild: Any) -> Any:
    return cloudbuild.BuildStep(
        name="gcr.io/cloud-builders/docker",
        entrypoint="bash",
        args=["-c", 'echo "$$DOCKERHUB_TOKEN" | docker login -u "$$DOCKERHUB_USERNAME" --password-stdin'],
        secret_env=list(DOCKERHUB_SECRETS),
    )


def dockerhub_secrets(cloudbuild: Any, project: str) -> Any:
    return cloudbuild.Secrets(
        secret_manager=[
            cloudbuild.SecretManagerSecret(version_name=f"projects/{project}/secrets/{name}/versions/latest", env=env)
            for env, name in DOCKERHUB_SECRETS.items()
        ]
    )


def ensure_credentials(
    project: str, ask: Callable[[str, bool], str], token: str, update: bool = False, endpoint: str = SECRET_MANAGER
) -> list[str]:
    """Make both Docker Hub secrets exist, asking `ask(label, hidden)` for each missing one (every one with
    `update`); returns what was done, one line per secret."""
    done = []
    for env, name in DOCKERHUB_SECRETS.items():
        label = "Docker Hub username" if env == "DOCKERHUB_USERNAME" else "Docker Hub access token"
        secret = f"{endpoint}/v1/projects/{project}/secrets/{name}"
        exists = _call("GET", secret, None, token, name) is not None
        if exists and not update:
            done.append(f"using the existing {label} secret {name}")
            continue
        value = ask(label, env == "DOCKERHUB_TOKEN")
        if not exists:
            body: dict[str, Any] = {"replication": {"automatic": {}}}
            query = urllib.parse.urlencode({"secretId": name})
            _call("POST", f"{endpoint}/v1/projects/{project}/secrets?{query}", body, token, name)
        payload = {"payload": {"data": base64.b64encode(value.encode()).decode()}}
        _call("POST", f"{secret}:addVersion", payload, token, name)
        done.append(f"saved the {label} in secret {name}")
    return done


def _call(method: str, url: str, body: Any, token: str, secret: str) -> Any:
    """The JSON answer; None for a 404 (a secret that does not exist)."""
    request = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and method == "GET":
            return None
        raise CredentialsError(
            f"Secret Manager refused {method} of secret {secret}: HTTP {exc.code} {exc.reason}"
        ) from None
    except OSError as exc:
        raise CredentialsError(f"cannot reach Secret Manager for secret {secret}: {exc}") from None
