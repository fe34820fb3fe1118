"""Turn a JobContext and a call into uploaded artifacts (SPEC 2.3 steps 2-7), ready for any backend.

The steps are the same for every backend; only the Storage differs (a local directory laid out like the
jobs bucket, or GCS). `handle.json` is written before the backend creates the job, so a crash between
the two leaves a handle that `attach` can explain instead of a job nobody can find.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.context import JobContext
from core.data import replace_data_refs
from core.packaging import SensitiveEnvWarning, build_context_zip, build_payload, capture_env, find_package_root, make_plan
from core.storage.base import Storage

PAYLOAD, CONTEXT, RESULT, HANDLE = "payload.pkl", "context.zip", "result.pkl", "handle.json"


@dataclass(frozen=True)
class Prepared:
    """What the backend needs to start the runner: where the artifacts are and their digests."""

    payload_uri: str
    context_uri: str
    result_uri: str
    payload_sha256: str
    context_sha256: str
    volume_paths: tuple[str, ...]

    def runner_args(self) -> list[str]:
        return ["--payload", self.payload_uri, "--context", self.context_uri, "--result", self.result_uri,
                "--payload-sha256", self.payload_sha256, "--context-sha256", self.context_sha256]


def handle_record(ctx: JobContext, pool: str | None, storage: Storage) -> dict[str, Any]:
    """The durable, JSON-serialisable JobHandle (SPEC 2.6)."""
    infra = ctx.infra
    output_dir = ctx.output_dir or storage.uri(f"{ctx.job_id}/output/")
    return {
        "job_id": ctx.job_id, "backend": ctx.backend, "project": infra.project, "cluster": infra.cluster,
        "zone": infra.zone, "namespace": infra.namespace, "bucket": ctx.bucket,
        "accelerator": ctx.accelerator_text, "num_nodes": ctx.num_nodes, "pool": pool,
        "func_name": ctx.func_name, "display_name": ctx.display_name, "created_at": ctx.created_at,
        "group_id": ctx.group_id, "profile": infra.profile,
        "result_uri": storage.uri(f"{ctx.job_id}/{RESULT}"), "output_dir": output_dir,
    }


def write_handle(storage: Storage, record: Mapping[str, Any]) -> None:
    storage.put_bytes(f"{record['job_id']}/{HANDLE}", json.dumps(dict(record), indent=2).encode())


def _module_file(func: Any) -> str | None:
    target = inspect.unwrap(func)
    try:
        return inspect.getsourcefile(target) or inspect.getfile(target)
    except (TypeError, OSError):
        module = sys.modules.get(getattr(target, "__module__", "") or "")
        return getattr(module, "__file__", None)


def package_root_for(func: Any) -> Path:
    """The function's package root; a function typed at a prompt ships the client's cwd."""
    module_file = _module_file(func)
    if module_file is None or not os.path.exists(module_file):
        return Path(os.environ.get("KINETIC_PACKAGE_ROOT") or os.getcwd()).resolve()
    return find_package_root(module_file)


def prepare(ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any], storage: Storage) -> Prepared:
    """Package and upload; raises before anything is uploaded on bad input (bad Data, unpicklable args)."""
    (args_, kwargs_), datas = replace_data_refs((tuple(args), dict(kwargs)), storage)
    volume_refs, volume_datas = replace_data_refs(dict(ctx.volumes), storage, label="volumes")
    with warnings.catch_warnings():
        warnings.simplefilter("always", SensitiveEnvWarning)
        env_vars, _ = capture_env(ctx.env_patterns)
    root = package_root_for(ctx.func)
    payload = build_payload(ctx.func, args_, kwargs_, env_vars, volume_refs, root)
    local = [d.local_path for d in (*datas, *volume_datas) if d.local_path is not None]
    plan = make_plan(root, _module_file(ctx.func))
    with tempfile.TemporaryDirectory(prefix="kinetic-pack-") as tmp:
        zip_path, context_sha = build_context_zip(root, Path(tmp) / CONTEXT, local, plan=plan)
        prefix = ctx.job_id
        storage.put_bytes(f"{prefix}/{PAYLOAD}", payload)
        storage.put_file(f"{prefix}/{CONTEXT}", zip_path)
    return Prepared(
        payload_uri=storage.uri(f"{prefix}/{PAYLOAD}"), context_uri=storage.uri(f"{prefix}/{CONTEXT}"),
        result_uri=storage.uri(f"{prefix}/{RESULT}"), payload_sha256=hashlib.sha256(payload).hexdigest(),
        context_sha256=context_sha, volume_paths=tuple(ctx.volumes),
    )
