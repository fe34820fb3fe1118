"""JobContext: every setting of one submission, resolved once, before anything else of it happens.

The decorator, `map` and the console all build a `JobContext` first; everything downstream (packaging,
upload, the backend) reads from it, so a setting is never resolved twice in two different ways.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinetic_tui.core.accelerators import AcceleratorConfig, format_accelerator, is_multi_host, parse_accelerator
from kinetic_tui.core.backends.kinds import KINDS, kind
from kinetic_tui.core.data import FUSE_MOUNT_ROOT, Data
from kinetic_tui.core.errors import ArgumentTypeError, ValidationError
from kinetic_tui.core.profiles import ResolvedInfra, resolve_infra
from kinetic_tui.core.submission.packaging.plan import Imports

BACKENDS = tuple(KINDS)
IMAGE_MODES = ("bundled", "prebuilt", "custom")


def new_job_id() -> str:
    return f"job-{secrets.token_hex(4)}"


def retry_job_id(previous_id: str) -> str:
    """The id of the retry of `previous_id`: derived, not random, so every client that retries the same
    attempt names the same job, and a retry queued by a client that died before recording it is found by
    the next one instead of being submitted a second time (attempt n+1 of an input is a function of its
    first job id and n)."""
    return f"job-{hashlib.sha256(f'{previous_id}/retry'.encode()).hexdigest()[:8]}"


def image_mode(container_image: str | None) -> str:
    """None (or "bundled") builds a bundled image; "prebuilt" installs requirements at start; anything else is
    used as given."""
    if container_image in (None, "bundled"):
        return "bundled"
    return "prebuilt" if container_image == "prebuilt" else "custom"


def choose_backend(infra_backend: str, accelerator: AcceleratorConfig, explicit: str | None) -> str:
    """Multi-host slices go to the kind that runs them (GKE: Pathways) unless `backend=` says otherwise.

    On the local backend a multi-host slice still runs locally: one emulated process per host.
    """
    if explicit is not None:
        return kind(explicit).name
    multi_host = kind(infra_backend).multi_host_kind
    if multi_host is not None and is_multi_host(accelerator):
        return multi_host
    return infra_backend


def check_volumes(volumes: Mapping[str, Any] | None) -> dict[str, Data]:
    if volumes is None:
        return {}
    if not isinstance(volumes, Mapping):
        raise ArgumentTypeError(f"volumes must map absolute paths to Data, got {type(volumes).__name__}")
    for path, value in volumes.items():
        if not isinstance(path, str) or not path.startswith("/"):
            raise ValidationError(f"volumes: {path!r} is not an absolute path (volumes map '/abs/path' to Data)")
        if not isinstance(value, Data):
            raise ArgumentTypeError(f"volumes[{path!r}] must be Data(...), got {type(value).__name__}")
        if path == FUSE_MOUNT_ROOT or path.startswith(FUSE_MOUNT_ROOT + "/"):
            raise ValidationError(
                f"volumes: {path!r} is under {FUSE_MOUNT_ROOT}, where fused Data arguments are mounted; "
                f"choose another path"
            )
    return dict(volumes)


def check_env_patterns(patterns: Iterable[str] | None) -> tuple[str, ...]:
    if patterns is None:
        return ()
    if isinstance(patterns, str):
        raise ValidationError("capture_env_vars must be a list of names or PREFIX* patterns, not a string")
    result = tuple(patterns)
    for pattern in result:
        if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
            raise ValidationError(f"capture_env_vars: {pattern!r} is not a NAME or PREFIX* pattern")
    return result


def check_output_dir(output_dir: str | os.PathLike[str] | None, backend: str) -> str | None:
    """A local job writes KINETIC_OUTPUT_DIR with plain file I/O, so it needs a local path (relative paths
    mean the client's cwd); a GKE job may name a bucket path."""
    if output_dir is None:
        return None
    text = os.fspath(output_dir) if isinstance(output_dir, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise ValidationError(f"output_dir must be a non-empty path, got {output_dir!r}")
    if not kind(backend).on_this_machine:
        return text
    if text.startswith("gs://"):
        raise ValidationError(
            f"output_dir {text!r}: the local backend writes outputs to a local directory; "
            f"pass a local path or omit output_dir"
        )
    return str(Path(text).expanduser().resolve())


def check_flag(field: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{field} must be True or False, got {value!r}")
    return value


def check_image_repo(repo: str | None) -> str | None:
    """A registry repository such as `mycompany/kinetic`: no tag, no whitespace."""
    if repo is None:
        return None
    if not isinstance(repo, str) or not re.fullmatch(r"[^\s:@]+(:\d+/[^\s:@]+)?", repo):
        raise ValidationError(
            f"base_image_repo must be an image repository without a tag, like mycompany/kinetic, got {repo!r}"
        )
    return repo


@dataclass(frozen=True)
class JobContext:
    job_id: str
    func: Callable[..., Any]
    func_name: str
    display_name: str
    infra: ResolvedInfra
    accelerator: AcceleratorConfig
    backend: str
    image_mode: str
    container_image: str | None
    spot: bool
    env_patterns: tuple[str, ...]
    volumes: Mapping[str, Data]
    output_dir: str | None
    created_at: float
    group_id: str | None = None
    group_index: int | None = None
    debug: bool = False  # the job starts debugpy and waits for a debugger before calling the function
    base_image_repo: str | None = None  # where prebuilt images come from (prebuilt mode only)
    extra: Mapping[str, Any] = field(default_factory=dict)
    # the directory to ship instead of the function's own root: our training entry imports the user's step
    # by name inside the job, so the attempt ships the step's project
    package_root: Path | None = None
    # with package_root: the imports and cwd the job recreates in it, instead of this process's sys.path and cwd
    package_imports: Imports | None = None

    def for_input(self, job_id: str, index: int) -> JobContext:
        """This context for input `index` of its map, under `job_id`: a copy with the two fields set, since
        `dataclasses.replace` runs the whole frozen `__init__` and a map makes one per input."""
        clone = object.__new__(JobContext)
        clone.__dict__.update(self.__dict__, job_id=job_id, group_index=index)
        return clone

    @property
    def accelerator_text(self) -> str:
        return format_accelerator(self.accelerator)

    @property
    def bucket(self) -> str:
        return self.infra.jobs_bucket

    @property
    def num_nodes(self) -> int:
        return self.accelerator.num_nodes

    @classmethod
    def from_params(
        cls,
        func: Callable[..., Any],
        accelerator: str = "cpu",
        *,
        container_image: str | None = None,
        zone: str | None = None,
        project: str | None = None,
        cluster: str | None = None,
        namespace: str | None = None,
        backend: str | None = None,
        capture_env_vars: Iterable[str] | None = None,
        volumes: Mapping[str, Any] | None = None,
        spot: bool = False,
        output_dir: str | os.PathLike[str] | None = None,
        profile: str | None = None,
        debug: bool = False,
        base_image_repo: str | None = None,
        display_name: str | None = None,
        group_id: str | None = None,
        group_index: int | None = None,
        job_id: str | None = None,
        package_root: Path | None = None,
        package_imports: Imports | None = None,
    ) -> JobContext:
        """Validate and resolve every setting; raises ValidationError before anything is created."""
        parsed = parse_accelerator(accelerator)
        if spot and not parsed.spot:
            parsed = parse_accelerator(format_accelerator(parsed) + ":spot")
        infra_backend = None if backend is None else kind(backend).profile_kind
        infra = resolve_infra(
            project=project, zone=zone, cluster=cluster, namespace=namespace, backend=infra_backend, profile=profile
        )
        chosen_backend = choose_backend(infra.backend, parsed, backend)
        func_name, short_name = function_names(func)
        return cls(
            job_id=job_id or new_job_id(),
            func=func,
            func_name=func_name,
            display_name=display_name or short_name,
            infra=infra,
            accelerator=parsed,
            backend=chosen_backend,
            image_mode=image_mode(container_image),
            container_image=container_image,
            spot=parsed.spot,
            env_patterns=check_env_patterns(capture_env_vars),
            volumes=check_volumes(volumes),
            output_dir=check_output_dir(output_dir, chosen_backend),
            created_at=time.time(),
            group_id=group_id,
            group_index=group_index,
            debug=check_flag("debug", debug),
            base_image_repo=check_image_repo(base_image_repo),
            package_root=package_root,
            package_imports=package_imports,
        )


def underlying(func: Callable[..., Any]) -> Callable[..., Any]:
    """The function a `functools.partial` (or a partial of one) calls: where its name and its module are."""
    while isinstance(func, functools.partial):
        func = func.func
    return func


def function_names(func: Callable[..., Any]) -> tuple[str, str]:
    """The qualified and short name a job is shown by. A partial is named for the function it wraps and a
    callable object for its class: their repr holds a memory address, which names nothing a user knows."""
    func = underlying(func)
    qualified: str = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or type(func).__qualname__
    short: str = getattr(func, "__name__", None) or type(func).__name__
    return qualified, short


def function_key(func: Callable[..., Any]) -> str:
    """MODULE:QUALNAME, what tells one function's batches from another's across processes (a map's lanes
    are sized from its function's last batch). Two scripts' `__main__.f` share a key: it sizes chunks only."""
    func = underlying(func)
    module = getattr(func, "__module__", None) or type(func).__module__
    return f"{module}:{function_names(func)[0]}"


def check_callable(func: object) -> Callable[..., Any]:
    """Decoration-time checks: these objects cannot be shipped as a plain function."""
    if isinstance(func, (classmethod, staticmethod)):
        raise TypeError(f"@run cannot decorate a {type(func).__name__} object; apply @run to a plain function")
    if hasattr(func, "cache_info") and hasattr(func, "__wrapped__"):
        raise TypeError("@run cannot decorate a functools.cache/lru_cache wrapper; decorate the plain function")
    if not callable(func):
        raise TypeError(f"@run needs a callable, got {type(func).__name__}")
    if inspect.isclass(func):
        raise TypeError(f"@run needs a function, got the class {func.__name__}")
    return func
