"""Turn a JobContext and a call into uploaded artifacts (data, payload, archive, handle), ready for any backend.

Submission is split in two so that a call that raises writes nothing: `pack` checks and pickles the call
(Data found, env captured, payload pickled, plan taken from the client's cwd and sys.path) while every
Data upload waits in a `DeferredWrites` queue; only then `upload` writes the data cache, the payload
and the archive. `handle.json` is written before the backend creates the job, so a crash between the
two leaves a handle that `attach` can explain instead of a job nobody can find.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinetic_tui.core.backends.kinds import kind
from kinetic_tui.core.data import fuse_mounts, replace_data_refs
from kinetic_tui.core.debugging import debug_env
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.handle_records import iso_utc, normalize
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.storage.base import Storage
from kinetic_tui.core.submission.context import JobContext, underlying
from kinetic_tui.core.submission.packaging import (
    PayloadError,
    SensitiveEnvWarning,
    build_payload,
    cached_context_zip,
    capture_env,
    find_package_root,
    is_installed,
    make_plan,
)

PAYLOAD, CONTEXT, RESULT, HANDLE = "payload.pkl", "context.zip", "result.pkl", "handle.json"


class DeferredWrites:
    """The `Uploads` view Data writes through: `exists` and `uri` pass through, writes queue until `flush`.

    Queued keys count as existing, so the same content in many inputs of a map is uploaded once; the
    queue keeps insertion order, so each Data's marker is still written after its files.
    """

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.bucket = storage.bucket
        self._queue: dict[str, bytes | Path] = {}

    def uri(self, key: str) -> str:
        return self.storage.uri(key)

    def exists(self, key: str) -> bool:
        return key in self._queue or self.storage.exists(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._queue[key] = bytes(data)

    def put_file(self, key: str, path: Path) -> None:
        self._queue[key] = Path(path)

    def flush(self) -> None:
        while self._queue:
            key, value = next(iter(self._queue.items()))
            if isinstance(value, Path):
                self.storage.put_file(key, value)
            else:
                self.storage.put_bytes(key, value)
            del self._queue[key]


@dataclass(frozen=True)
class Packed:
    """One call, checked and pickled; nothing of it is written yet."""

    ctx: JobContext
    payload: bytes
    root: Path
    plan: Mapping[str, Any]
    data_paths: tuple[Path, ...]  # local Data, kept out of context.zip
    fuse_mounts: tuple[tuple[str, str], ...] = ()  # (gs:// directory, mount path) of fused Data


@dataclass(frozen=True)
class Prepared:
    """What the backend needs to start the runner: where the artifacts are and their digests."""

    payload_uri: str
    context_uri: str
    result_uri: str
    payload_sha256: str
    context_sha256: str
    volume_paths: tuple[str, ...]
    fuse_mounts: tuple[tuple[str, str], ...] = ()

    def runner_args(self) -> list[str]:
        return [
            "--payload",
            self.payload_uri,
            "--context",
            self.context_uri,
            "--result",
            self.result_uri,
            "--payload-sha256",
            self.payload_sha256,
            "--context-sha256",
            self.context_sha256,
        ]


def handle_record(ctx: JobContext, pool: str | None, storage: Storage, output_dir: str) -> dict[str, Any]:
    """The durable JobHandle: plain JSON in the shape both this package and Kinetic read back (the keys are
    listed in `core.handle_records`), so `attach` can rebuild the handle in another process."""
    infra = ctx.infra
    return {
        "job_id": ctx.job_id,
        "backend": ctx.backend,
        "project": infra.project,
        "cluster_name": infra.cluster,
        "cluster": infra.cluster,
        "zone": infra.zone,
        "namespace": infra.namespace,
        "bucket_name": ctx.bucket,
        "bucket": ctx.bucket,
        "k8s_name": ctx.job_id,
        "image_uri": "",
        "accelerator": ctx.accelerator_text,
        "num_nodes": ctx.num_nodes,
        "pool": pool,
        "func_name": ctx.func_name,
        "display_name": ctx.display_name,
        "created_at": iso_utc(ctx.created_at),
        "submitted_at": ctx.created_at,
        "group_id": ctx.group_id,
        "group_kind": None if ctx.group_id is None else "map",
        "group_index": ctx.group_index,
        "debug": ctx.debug,
        "profile": infra.profile,
        "result_uri": storage.uri(f"{ctx.job_id}/{RESULT}"),
        "output_dir": output_dir,
    }


@contextlib.contextmanager
def input_named(index: int | None) -> Iterator[None]:
    """Prefix a bad input's error with its index (`input 3: ...`), so the input of a map that cannot be
    submitted is named; `index` None (a single call) leaves the error as it is."""
    try:
        yield
    except (PayloadError, ValidationError) as exc:
        if index is None:
            raise
        raise type(exc)(f"input {index}: {exc}") from exc


def retry_record(
    previous: Mapping[str, Any], job_id: str, storage: Storage, default_output: Callable[[str, Storage], str]
) -> dict[str, Any]:
    """The handle record of a new attempt of `previous`'s call under `job_id`: its own result URI, its
    own default output directory unless the user chose one (which the retry keeps), and `retry_of`
    naming the attempt it retries (what tells a queued retry from an unrelated job of the same id)."""
    chosen = previous["output_dir"] != default_output(previous["job_id"], storage)
    now = time.time()
    return {
        **normalize(previous),
        "job_id": job_id,
        "k8s_name": job_id,
        "retry_of": previous["job_id"],
        "created_at": iso_utc(now),
        "submitted_at": now,
        "result_uri": storage.uri(f"{job_id}/{RESULT}"),
        "output_dir": previous["output_dir"] if chosen else default_output(job_id, storage),
    }


def write_handle(storage: Storage, record: Mapping[str, Any]) -> None:
    storage.put_bytes(f"{record['job_id']}/{HANDLE}", json.dumps(dict(record), indent=2).encode())


def module_file(func: Any) -> str | None:
    target = inspect.unwrap(underlying(inspect.unwrap(func)))
    try:
        return inspect.getsourcefile(target) or inspect.getfile(target)
    except (TypeError, OSError):
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        return getattr(module, "__file__", None)


def package_root_for(func: Any) -> Path:
    """The function's package root; a function typed at a prompt ships the client's cwd.

    A function from an installed package (under the interpreter's prefix, e.g. site-packages) travels by
    reference, like any installed dependency: its "root" would be all of site-packages. It ships an empty
    root instead, and the job's environment must have the package (the local backend runs this
    interpreter; a GKE image installs it)."""
    path = module_file(func)
    if path is None or not os.path.exists(path):
        return Path(os.environ.get("KINETIC_PACKAGE_ROOT") or os.getcwd()).resolve()
    if not os.environ.get("KINETIC_PACKAGE_ROOT") and is_installed(path):
        empty = kinetic_home() / "cache" / "empty-root"
        empty.mkdir(parents=True, exist_ok=True)
        return empty
    return find_package_root(path)


def captured_env(patterns: Sequence[str]) -> dict[str, str]:
    """The variables `capture_env_vars` selects; each secret-looking one warns every time it is captured."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", SensitiveEnvWarning)
        env_vars, _ = capture_env(patterns)
    return env_vars


def pack(
    ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any], writes: DeferredWrites, env_vars: Mapping[str, str]
) -> Packed:
    """Check and pickle the call; raises (bad Data, unpicklable argument) with nothing written."""
    if ctx.debug:
        env_vars = {**env_vars, **debug_env(kind(ctx.backend).on_this_machine)}
    (args_, kwargs_), datas = replace_data_refs((tuple(args), dict(kwargs)), writes)
    volume_refs, volume_datas = replace_data_refs(dict(ctx.volumes), writes, label="volumes")
    # a fused volume is mounted at its own path (a copy per volume: one Data may also be an argument)
    volume_refs = {path: {**ref, "mount_path": path} if ref.get("fuse") else ref for path, ref in volume_refs.items()}
    root = ctx.package_root or package_root_for(ctx.func)
    payload = build_payload(ctx.func, args_, kwargs_, env_vars, volume_refs, root)
    local = tuple(d.local_path for d in (*datas, *volume_datas) if d.local_path is not None)
    mounts = tuple(fuse_mounts([args_, kwargs_, volume_refs])) if any(d.fuse for d in (*datas, *volume_datas)) else ()
    sys_path, cwd = ctx.package_imports or (None, None)
    plan = make_plan(root, module_file(ctx.func), cwd=cwd, sys_path=sys_path)
    return Packed(ctx, payload, root, plan, local, mounts)


class Archives:
    """The context.zip files of one submission, as entries of the archive cache: each distinct (root, plan,
    kept-out Data) is looked up once, so a map of N inputs scans its tree once, not N times."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, str, tuple[Path, ...]], tuple[Path, str]] = {}

    def get(self, packed: Packed) -> tuple[Path, str]:
        key = (str(packed.root), json.dumps(dict(packed.plan), sort_keys=True), packed.data_paths)
        if key not in self._built:
            self._built[key] = cached_context_zip(packed.root, packed.data_paths, plan=packed.plan)
        return self._built[key]


def upload(packed: Packed, storage: Storage, archives: Archives) -> Prepared:
    """Write payload.pkl and context.zip under the job's prefix and return what the runner needs."""
    prefix = packed.ctx.job_id
    zip_path, context_sha = archives.get(packed)
    storage.put_bytes(f"{prefix}/{PAYLOAD}", packed.payload)
    storage.put_shared(f"{prefix}/{CONTEXT}", zip_path)
    return Prepared(
        payload_uri=storage.uri(f"{prefix}/{PAYLOAD}"),
        context_uri=storage.uri(f"{prefix}/{CONTEXT}"),
        result_uri=storage.uri(f"{prefix}/{RESULT}"),
        payload_sha256=hashlib.sha256(packed.payload).hexdigest(),
        context_sha256=context_sha,
        volume_paths=tuple(packed.ctx.volumes),
        fuse_mounts=packed.fuse_mounts,
    )
