"""Stack state: the only module that drives the Pulumi Automation API (`up`, `destroy`).

Callers (`up`, `down`, `pool`, `status` on a GKE profile) go through `load_state`, `apply_update` and
`apply_destroy`, which talk to a `StackBackend`. The real `AutomationBackend` keeps the state in
`gs://{project}-kinetic-state` under the stack `{project}-{cluster}` of the Pulumi project `kinetic`;
tests substitute a fake. Before touching Pulumi the real backend runs a bounded preflight (CLI on PATH,
the `gcp` extra, Google credentials, the state bucket answering within `timeout`), so each common
set-up problem is one `InfraError` line with its fix instead of a hang or a Go stack trace.

Decisions made here:
- The stack holds no secrets, so when neither PULUMI_CONFIG_PASSPHRASE nor ..._FILE is set the
  passphrase secrets provider gets an empty passphrase (set your own to override it).
- `up` and `destroy` are not time-limited (creating a GKE cluster takes ~10 minutes); `on_output`
  streams the engine's progress lines instead. Only the preflight has a deadline.
- `apply_destroy` on a stack that does not exist is a NotFoundError, not a silent success.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.infra import InfraConfig, import_extra

PULUMI_PROJECT = "kinetic"
PREFLIGHT_TIMEOUT = 10.0
INSTALL_PULUMI = "install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh (https://www.pulumi.com/docs/install/)"
LOGIN_GCLOUD = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"

OnOutput = Callable[[str], Any]


class InfraError(KineticError):
    """Infrastructure could not be read or changed; the message says why and how to fix it."""


class PulumiCliMissingError(InfraError):
    """The Automation API shells out to the `pulumi` binary, which is not on PATH."""


class CredentialsError(InfraError):
    """No Google credentials, or they may not use the state bucket."""


class StateBackendError(InfraError):
    """The state bucket is missing or did not answer in time."""


class StackOperationError(InfraError):
    """A Pulumi command failed (including a stack locked by another update)."""


@dataclass(frozen=True)
class StackRef:
    """Where one cluster's stack lives."""

    project: str  # the GCP project
    stack: str
    backend_url: str

    @classmethod
    def for_config(cls, config: InfraConfig) -> StackRef:
        return cls(config.project, config.stack, config.state_url)

    @property
    def state_bucket(self) -> str:
        return self.backend_url.removeprefix("gs://")


@dataclass(frozen=True)
class StackState:
    ref: StackRef
    exists: bool
    outputs: Mapping[str, Any] = field(default_factory=dict)
    last_result: str | None = None  # "succeeded", "failed", "in-progress"
    last_update: datetime | None = None


@dataclass(frozen=True)
class UpdateResult:
    ref: StackRef
    changes: Mapping[str, int]  # operation ("create", "update", "same", ...) -> resource count
    outputs: Mapping[str, Any]


@dataclass(frozen=True)
class DestroyResult:
    ref: StackRef
    changes: Mapping[str, int]


class StackBackend(Protocol):
    def read(self, ref: StackRef) -> StackState: ...

    def up(self, ref: StackRef, program: Callable[[], None], on_output: OnOutput | None) -> UpdateResult: ...

    def destroy(self, ref: StackRef, on_output: OnOutput | None) -> DestroyResult: ...


# ---------------------------------------------------------------------------------------------------------
# The public entry points


def load_state(config: InfraConfig, backend: StackBackend | None = None) -> StackState:
    """The stack's outputs and last update, or `exists=False` before the first `up`."""
    return (backend or AutomationBackend()).read(_ref(config))


def apply_update(
    config: InfraConfig, backend: StackBackend | None = None, on_output: OnOutput | None = None
) -> UpdateResult:
    """Create or converge the cluster's infrastructure to `config` (`kinetic-tui up`)."""
    ref = _ref(config)
    program = import_extra("kinetic_tui.infra.program", "GKE infrastructure").stack_program(config)
    return (backend or AutomationBackend()).up(ref, program, on_output)


def apply_destroy(
    config: InfraConfig, backend: StackBackend | None = None, on_output: OnOutput | None = None
) -> DestroyResult:
    """Delete every resource of the cluster's stack (`kinetic-tui down`); the stack must exist."""
    ref = _ref(config)
    backend = backend or AutomationBackend()
    if not backend.read(ref).exists:
        raise NotFoundError(f"no stack {ref.stack!r} in {ref.backend_url}; nothing to destroy")
    return backend.destroy(ref, on_output)


def _ref(config: InfraConfig) -> StackRef:
    if not isinstance(config, InfraConfig):
        raise ValidationError(f"config must be an infra.InfraConfig, not {type(config).__name__}")
    return StackRef.for_config(config)


# ---------------------------------------------------------------------------------------------------------
# The real backend


class AutomationBackend:
    """`pulumi.automation` with an inline program and the GCS state backend.

    `which`, `credentials` and `probe` are the preflight's seams: tests point them at a fake PATH, fixed
    credentials or a storage emulator; production uses the defaults.
    """

    def __init__(
        self,
        *,
        which: Callable[[str], str | None] = shutil.which,
        credentials: Callable[[], Any] | None = None,
        probe: Callable[[StackRef, Any, float], None] | None = None,
        timeout: float = PREFLIGHT_TIMEOUT,
    ) -> None:
        self._which = which
        self._credentials = credentials or _default_credentials
        self._probe = probe or _probe_state_bucket
        self._timeout = timeout

    def read(self, ref: StackRef) -> StackState:
        auto = self._preflight(ref)

        def run() -> tuple[Any, list[Any]] | None:
            try:
                stack = auto.select_stack(ref.stack, PULUMI_PROJECT, program=_no_program, opts=_options(auto, ref))
            except auto.StackNotFoundError:
                return None
            return stack.outputs(), stack.history(page_size=1)

        found = _guarded(auto, "read", ref, run)
        if found is None:
            return StackState(ref, exists=False)
        outputs, updates = found
        last = updates[0] if updates else None
        return StackState(
            ref,
            True,
            output_values(outputs),
            last.result if last else None,
            (last.end_time or last.start_time) if last else None,
        )

    def up(self, ref: StackRef, program: Callable[[], None], on_output: OnOutput | None) -> UpdateResult:
        auto = self._preflight(ref)

        def run() -> Any:
            stack = auto.create_or_select_stack(ref.stack, PULUMI_PROJECT, program=program, opts=_options(auto, ref))
            return stack.up(on_output=on_output)

        result = _guarded(auto, "up", ref, run)
        return UpdateResult(ref, resource_changes(result.summary), output_values(result.outputs))

    def destroy(self, ref: StackRef, on_output: OnOutput | None) -> DestroyResult:
        auto = self._preflight(ref)

        def run() -> Any:
            stack = auto.select_stack(ref.stack, PULUMI_PROJECT, program=_no_program, opts=_options(auto, ref))
            return stack.destroy(on_output=on_output)

        return DestroyResult(ref, resource_changes(_guarded(auto, "destroy", ref, run).summary))

    def _preflight(self, ref: StackRef) -> Any:
        """Cheapest checks first; every one is local or bounded by the timeout."""
        if self._which("pulumi") is None:
            raise PulumiCliMissingError(f"the `pulumi` CLI is not on PATH; {INSTALL_PULUMI}")
        auto = import_extra("pulumi.automation", "GKE infrastructure")
        credentials = self._credentials()
        self._probe(ref, credentials, self._timeout)
        return auto


def _default_credentials() -> Any:
    google_auth = import_extra("google.auth", "GKE infrastructure")
    try:
        credentials, _ = google_auth.default()
    except google_auth.exceptions.DefaultCredentialsError:
        raise CredentialsError(f"no Google Cloud credentials found; {LOGIN_GCLOUD}") from None
    return credentials


def _probe_state_bucket(ref: StackRef, credentials: Any, timeout: float) -> None:
    """One bounded, unretried bucket lookup: distinguishes missing, forbidden and unreachable."""
    storage = import_extra("google.cloud.storage", "GKE infrastructure")
    from google.api_core import exceptions
    from google.auth.exceptions import TransportError

    client = storage.Client(project=ref.project, credentials=credentials)
    try:
        bucket = client.lookup_bucket(ref.state_bucket, timeout=timeout, retry=None)
    except exceptions.Forbidden:
        raise CredentialsError(
            f"your credentials may not read {ref.backend_url}; grant them roles/storage.objectAdmin on it "
            f"or log in as another account ({LOGIN_GCLOUD})"
        ) from None
    except (exceptions.GoogleAPIError, TransportError, OSError) as exc:  # requests' errors are OSErrors
        raise StateBackendError(
            f"cannot reach the Pulumi state backend {ref.backend_url} ({type(exc).__name__}, "
            f"timeout {timeout:g}s); check the network or proxy and retry"
        ) from None
    if bucket is None:
        raise StateBackendError(
            f"the Pulumi state bucket {ref.backend_url} does not exist; create it with "
            f"`gcloud storage buckets create {ref.backend_url} --project {ref.project} --uniform-bucket-level-access`"
        )


def _options(auto: Any, ref: StackRef) -> Any:
    env = {"PULUMI_SKIP_UPDATE_CHECK": "true"}
    if "PULUMI_CONFIG_PASSPHRASE" not in os.environ and "PULUMI_CONFIG_PASSPHRASE_FILE" not in os.environ:
        env["PULUMI_CONFIG_PASSPHRASE"] = ""
    settings = auto.ProjectSettings(
        name=PULUMI_PROJECT, runtime="python", backend=auto.ProjectBackend(url=ref.backend_url)
    )
    return auto.LocalWorkspaceOptions(project_settings=settings, env_vars=env)


def _no_program() -> None:
    """`select_stack` wants a program; reading and destroying never run it."""


def _guarded(auto: Any, operation: str, ref: StackRef, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except auto.ConcurrentUpdateError:
        raise StackOperationError(
            f"stack {ref.stack!r} is locked by another update; wait for it to finish, or if it crashed run "
            f"`pulumi cancel --stack {ref.stack}` with backend {ref.backend_url}"
        ) from None
    except auto.StackNotFoundError:
        raise NotFoundError(f"no stack {ref.stack!r} in {ref.backend_url}") from None
    except auto.CommandError as exc:
        raise StackOperationError(f"pulumi {operation} of stack {ref.stack!r} failed: {error_line(str(exc))}") from None


def error_line(command_error: str) -> str:
    """The most telling line of a Pulumi CLI failure: the last `error:` line of stderr, else its last line,
    else stdout's last line, else the exit code (`str(CommandError)` is "code: N / stdout: ... / stderr: ...")."""
    head, _, stderr = command_error.partition("\n stderr: ")
    code, _, stdout = head.partition("\n stdout: ")
    for section in (stderr, stdout):
        lines = [line.strip() for line in section.splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line.lower()]
        if lines:
            return (errors or lines)[-1]
    return code.strip() or "no output"


def resource_changes(summary: Any) -> dict[str, int]:
    """`UpdateSummary.resource_changes` as a plain dict (None before the engine reports any)."""
    return dict(summary.resource_changes or {})


def output_values(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Stack outputs without their wrappers; secrets stay masked so they never reach a log or the UI."""
    return {name: "[secret]" if output.secret else output.value for name, output in outputs.items()}
