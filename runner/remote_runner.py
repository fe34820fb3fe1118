"""The kinetic job runner: fetch a job, check it, run it, and store its result.

This file is shipped on its own into pods and local job processes, so it imports only the standard
library and cloudpickle (google-cloud-storage lazily, for gs:// URIs only) and nothing of ours. It keeps
its top-level imports to what every run needs because its start-up time is the floor of every job's
latency; a warm fork server may also import it once and call `main` in forked children.

Usage: python remote_runner.py --payload URI --context URI --result URI --payload-sha256 H
       --context-sha256 H [--requirements URI] [--workdir DIR]
URIs are gs://bucket/key or local paths. The host index comes from TPU_WORKER_ID (default 0). Host 0
writes the result payload at --result; worker i != 0 writes result-worker-{i}.pkl next to it only when it
fails. Every host then writes its JSON summary beside it (result.json, result-worker-{i}.json): its own
record of how it ended, which a scheduler that lost the host's exit status goes by.
Exit status: 0 success, 1 the job failed (the result payload says where), 2 bad command line.

Work dir layout: download/ (artifacts fetched from gs://; local ones are read where they lie), code/ (the
extracted context), data/ (data refs), output/ (KINETIC_OUTPUT_DIR unless the launcher set one).

`--requirements` (prebuilt-image mode) is installed with `pip install -r` into the running interpreter's
environment: the pod's image is disposable and pip can then reuse what the image already ships.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle

PHASES = ("download", "verify", "install", "extract", "unpickle", "environment", "data", "debug", "execute", "upload")
DATA_REF_KEY = "__kinetic_data_ref__"
PLAN_MEMBER = ".kinetic/plan.json"
_S_IFMT, _S_IFLNK = 0o170000, 0o120000
_MAX_LINK_DEPTH = 40
_gcs_client: Any = None


class PhaseError(Exception):
    """A failure attributed to one phase; `cause` is the exception the job reports."""

    def __init__(self, phase: str, cause: BaseException, tb: str) -> None:
        super().__init__(f"{phase}: {cause!r}")
        self.phase, self.cause, self.tb = phase, cause, tb


def log(message: str) -> None:
    """Progress goes to stderr, which the launcher turns into the job's log."""
    print(f"[kinetic] {message}", file=sys.stderr, flush=True)


def _format_exc(exc: BaseException) -> str:
    """The traceback from the first frame that is not the runner's own: a user's error starts at the
    user's function. An error raised by the runner itself keeps its frames."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


class _Phase:
    """Time a phase, log its outcome and wrap whatever it raises in a PhaseError naming it."""

    def __init__(self, name: str, quiet: bool = False) -> None:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        self.name, self.quiet = name, quiet  # quiet: log failures only (a lane runs phases per input)

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: Any) -> None:
        elapsed = time.perf_counter() - self.start
        if exc is None:
            if not self.quiet:
                log(f"phase {self.name} ok ({elapsed:.2f}s)")
            return
        log(f"phase {self.name} FAILED ({elapsed:.2f}s): {type(exc).__name__}: {exc}")
        raise PhaseError(self.name, exc, _format_exc(exc)) from exc


# --- storage: local paths and gs:// ---------------------------------------------------------------


def _split_gs(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"URI {uri!r} names no bucket (expected gs://BUCKET/KEY)")
    return bucket, key


def _gcs() -> Any:
    global _gcs_client
    if _gcs_client is None:
        from google.cloud import storage  # only jobs that use gs:// pay for this import

        _gcs_client = storage.Client()
    return _gcs_client


def _blob(uri: str) -> Any:
    bucket, key = _split_gs(uri)
    return _gcs().bucket(bucket).blob(key)


def fetch(uri: str, dest: Path) -> None:
    """Copy one object (gs:// or a local path) to `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if uri.startswith("gs://"):
        _blob(uri).download_to_filename(str(dest))
    else:
        import shutil

        shutil.copyfile(uri, dest)


def fetch_tree(uri: str, dest: Path) -> None:
    """Copy everything under a directory URI (gs://.../prefix/ or a local directory) into `dest`."""
    if not uri.startswith("gs://"):
        import shutil

        shutil.copytree(uri, dest, symlinks=False, dirs_exist_ok=True)
        return
    bucket, prefix = _split_gs(uri)
    dest.mkdir(parents=True, exist_ok=True)
    for blob in _gcs().list_blobs(bucket, prefix=prefix):
        rel = blob.name[len(prefix) :]
        if not rel or rel.endswith("/"):  # the prefix itself or a folder placeholder
            continue
        parts = rel.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"object {blob.name!r} under {uri!r} would land outside {dest}")
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        blob.download_to_filename(str(target))


def fetch_payload(uri: str, dest: Path) -> bytes:
    """The payload's bytes. A local one is read where it lies. A downloaded copy is removed at once: it
    holds the job's captured secret values in clear, and nothing reads it again (the job directory may
    outlive the job)."""
    if not uri.startswith("gs://"):
        return Path(uri).read_bytes()
    fetch(uri, dest)
    try:
        return dest.read_bytes()
    finally:
        dest.unlink(missing_ok=True)


def fetched_file(uri: str, dest: Path) -> Path:
    """A file holding the object: a local one as it lies (this user owns it and nothing writes it once
    uploaded), anything else downloaded to `dest`."""
    if uri.startswith("gs://"):
        fetch(uri, dest)
        return dest
    if not os.path.isfile(uri):
        raise FileNotFoundError(f"no such file: {uri!r}")
    return Path(uri)


def store(uri: str, data: bytes) -> None:
    """Write an object; a local result appears atomically so a poller never reads half of it."""
    if uri.startswith("gs://"):
        _blob(uri).upload_from_string(data, content_type="application/octet-stream")
        return
    path = Path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            view = memoryview(data)
            while view:  # unbuffered: a result is written once, in as few system calls as it takes
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sibling_uri(uri: str, name: str) -> str:
    """The URI of `name` in the same directory (or gs:// prefix) as `uri`."""
    head, sep, _ = uri.rpartition("/")
    return f"{head}{sep}{name}"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_digest(what: str, actual: str, expected: str) -> None:
    if actual != expected.strip().lower():
        raise ValueError(f"{what} SHA-256 mismatch: expected {expected}, got {actual}; refusing to run it")


# --- extract: nothing may land outside the code directory -------------------------------------------


def _member_parts(name: str) -> list[str]:
    normalized = name.replace("\\", "/")
    if normalized.startswith("/") or (len(normalized) > 1 and normalized[1] == ":"):
        raise ValueError(f"archive member {name!r} has an absolute path")
    parts = [part for part in normalized.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"archive member {name!r} contains '..'")
    return parts


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return (info.external_attr >> 16) & _S_IFMT == _S_IFLNK


def _resolve(parts: list[str], links: dict[str, str], depth: int = 0) -> list[str] | None:
    """Resolve a path inside the archive, following archive symlinks; None if it would leave the root.

    Lexical checks alone are not enough: with `a -> .`, the link `a/b -> ..` looks harmless but resolves
    to the parent of the root. Resolving physically through the archive's own links closes that hole.
    """
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
            continue
        out.append(part)
        target = links.get("/".join(out))
        if target is not None:
            resolved = _follow(out[:-1], target, links, depth)
            if resolved is None:
                return None
            out = resolved
    return out


def _follow(parent: list[str], target: str, links: dict[str, str], depth: int = 0) -> list[str] | None:
    """Where a link in `parent` pointing at `target` lands; None if outside the root (or a loop)."""
    if depth >= _MAX_LINK_DEPTH or target.startswith("/"):
        return None
    return _resolve(parent + target.split("/"), links, depth + 1)


def check_archive(archive: zipfile.ZipFile) -> list[tuple[zipfile.ZipInfo, list[str]]]:
    """Validate every member before anything is written; returns members with their path parts."""
    members = [(info, _member_parts(info.filename)) for info in archive.infolist()]
    links = {"/".join(parts): archive.read(info).decode() for info, parts in members if _is_symlink(info)}
    for info, parts in members:
        if not parts:
            raise ValueError(f"archive member {info.filename!r} names the archive root")
        if _resolve(parts[:-1], links) is None:
            raise ValueError(f"archive member {info.filename!r} would be written outside the work dir")
        target = links.get("/".join(parts))
        if target is not None and _follow(parts[:-1], target, links) is None:
            raise ValueError(f"archive symlink {info.filename!r} -> {target!r} points outside the work dir")
    return members


def extract(archive_path: Path, dest: Path) -> bytes | None:
    """Check every member, then unpack into a fresh `dest` (a stale symlink there could redirect writes).
    A member keeps its archived mode less the process umask, like any file this process creates. The plan
    is the runner's, not the job's: it is returned (None when the archive has none), not written."""
    umask = os.umask(0o077)
    os.umask(umask)
    plan = None
    with zipfile.ZipFile(archive_path) as archive:
        members = check_archive(archive)
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for info, parts in members:
            target = dest.joinpath(*parts)
            if "/".join(parts) == PLAN_MEMBER and not _is_symlink(info):
                plan = archive.read(info)
            elif _is_symlink(info):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(archive.read(info).decode(), target)
            elif info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, open(target, "wb") as sink:
                    while block := source.read(1 << 20):
                        sink.write(block)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode & ~umask)
    return plan


# --- unpickle and environment ----------------------------------------------------------------------

_PAYLOAD_FIELDS: dict[str, tuple[type, ...]] = {
    "args": (list, tuple),
    "kwargs": (dict,),
    "env_vars": (dict,),
    "volumes": (dict,),
}


def load_payload(data: bytes) -> dict[str, Any]:
    payload = cloudpickle.loads(data)
    if not isinstance(payload, dict) or not callable(payload.get("func")):
        raise ValueError("payload.pkl must hold a dict with a callable 'func'")
    for field, kinds in _PAYLOAD_FIELDS.items():
        value = payload.setdefault(field, kinds[0]())
        if not isinstance(value, kinds):
            raise ValueError(
                f"payload field {field!r} has type {type(value).__name__}, "
                f"expected {' or '.join(kind.__name__ for kind in kinds)}"
            )
    return payload


def _inside(root: Path, rel: str, field: str) -> Path:
    """`root / rel` resolved, which must stay under `root` (itself resolved)."""
    path = (root / rel).resolve() if rel not in ("", ".") else root
    if not path.is_relative_to(root):
        raise ValueError(f"plan.json {field} entry {rel!r} points outside the package root")
    return path


def apply_environment(code_dir: Path, plan_bytes: bytes | None, env_vars: dict[str, str], output_dir: Path) -> None:
    """Make the job see what the client saw: its sys.path entries, its cwd, its captured env vars."""
    if plan_bytes is None:
        raise FileNotFoundError(f"context archive has no {PLAN_MEMBER}")
    plan = json.loads(plan_bytes)
    code_dir = code_dir.resolve()
    entries = [str(_inside(code_dir, rel, "sys_path_rel")) for rel in plan.get("sys_path_rel") or []]
    cwd_rel = plan.get("client_cwd_rel")
    cwd = _inside(code_dir, cwd_rel, "client_cwd_rel") if cwd_rel is not None else code_dir
    bad = {k: v for k, v in env_vars.items() if not (isinstance(k, str) and isinstance(v, str))}
    if bad:
        raise ValueError(f"env_vars must map str to str; bad entries: {sorted(map(repr, bad))}")
    output_dir.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = entries
    os.chdir(cwd)
    os.environ.update(env_vars)
    os.environ["KINETIC_OUTPUT_DIR"] = str(output_dir)


# --- data refs -------------------------------------------------------------------------------------


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and value.get(DATA_REF_KEY) == 1 and isinstance(value.get("uri"), str)


def _ref_name(ref: dict[str, Any]) -> str:
    name = ref.get("name") or ref["uri"].rstrip("/").rsplit("/", 1)[-1]
    if not isinstance(name, str) or "/" in name or name in (".", ".."):
        raise ValueError(f"data ref name {name!r} is not a plain file name")
    return name


def materialize(ref: dict[str, Any], dest: Path) -> None:
    """Download (gs://, hf://) or copy (local path) one data ref to `dest`."""
    if ref["uri"].startswith("hf://"):
        fetch_hf(ref, dest)
    elif ref.get("is_dir"):
        fetch_tree(ref["uri"], dest)
    else:
        fetch(ref["uri"], dest)


def fused_path(ref: dict[str, Any]) -> str | None:
    """Where a fused ref is read in place: a local URI is the cached content itself, a gs:// one is the
    pod's read-only GCS FUSE mount (the mounted directory, or the object inside it). None when the ref is
    not fused or its mount is absent (a job run where no CSI driver mounted it): then it is copied."""
    if not ref.get("fuse"):
        return None
    uri: str = ref["uri"]
    if not uri.startswith("gs://"):
        return uri.rstrip("/") or uri
    mount = ref.get("mount_path")
    if not (isinstance(mount, str) and os.path.isdir(mount)):
        log(f"data: {uri} is fused but {mount!r} is not mounted here; copying it instead")
        return None
    return mount if ref.get("is_dir") else os.path.join(mount, _ref_name(ref))


_HF_OPTIONS = ("split", "config_name", "revision")


def _hf_source(uri: str) -> tuple[str, dict[str, str | None]]:
    """`hf://OWNER/NAME?split=&config_name=&revision=` -> (repo id, those options)."""
    import urllib.parse

    parsed = urllib.parse.urlparse(uri)
    query = urllib.parse.parse_qs(parsed.query)
    options: dict[str, str | None] = {key: query[key][0] if query.get(key) else None for key in _HF_OPTIONS}
    return (parsed.netloc + parsed.path).strip("/"), options


def fetch_hf(ref: dict[str, Any], dest: Path) -> None:
    """A Hugging Face dataset, fetched with huggingface_hub from HF_ENDPOINT (the Hub by default).

    With `datasets` installed the job gets what `datasets.load_dataset(...).save_to_disk` writes, for
    `datasets.load_from_disk` (the split and config of the URI applied); without it, the repo's files."""
    import shutil
    import tempfile

    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise RuntimeError(
            "hf:// data needs the huggingface_hub package in the job's environment: add huggingface_hub "
            "to the job's requirements"
        ) from None
    repo_id, options = _hf_source(ref["uri"])
    trust = bool(ref.get("hf_trust_remote_code"))
    if trust:
        log(f"data: hf_trust_remote_code=True lets {repo_id!r} run its own code in this job")
    with tempfile.TemporaryDirectory(prefix="kinetic-hf-") as tmp:
        snapshot = Path(tmp, "snapshot")
        snapshot_download(
            repo_id, repo_type="dataset", revision=options["revision"], local_dir=snapshot, cache_dir=Path(tmp, "hub")
        )
        shutil.rmtree(snapshot / ".cache", ignore_errors=True)  # huggingface_hub's bookkeeping, not data
        try:
            import datasets
        except ImportError:
            log(f"data: {repo_id} fetched as its repository's files (install datasets for load_from_disk)")
            shutil.move(snapshot, dest)
            return
        extra = {"trust_remote_code": True} if trust else {}
        loaded = datasets.load_dataset(
            str(snapshot), name=options["config_name"], split=options["split"], cache_dir=str(Path(tmp, "ds")), **extra
        )
        loaded.save_to_disk(str(dest))


class DataResolver:
    """Replace data refs at any nesting depth by local paths, fetching each distinct URI once."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.fetched: dict[str, str] = {}

    def local_path(self, ref: dict[str, Any]) -> str:
        in_place = fused_path(ref)
        if in_place is not None:
            return in_place
        uri = ref["uri"]
        if uri not in self.fetched:
            dest = self.data_dir / hashlib.sha256(uri.encode()).hexdigest()[:16] / _ref_name(ref)
            materialize(ref, dest)
            self.fetched[uri] = str(dest)
        return self.fetched[uri]

    def replace(self, value: Any) -> Any:
        if _is_ref(value):
            return self.local_path(value)
        if isinstance(value, list):
            return [self.replace(item) for item in value]
        if isinstance(value, tuple):
            items = [self.replace(item) for item in value]
            cls: Any = type(value)  # with `_fields` it is a namedtuple class, whose `_make` the checker cannot see
            return cls._make(items) if hasattr(value, "_fields") else cls(items)
        if isinstance(value, dict):
            return {key: self.replace(item) for key, item in value.items()}
        return value


def mount_volumes(volumes: dict[str, Any]) -> None:
    """A volume's data appears at its absolute path; the launcher made that path usable for the job.

    A fused volume is not copied: a pod's CSI driver already mounted it there, and on this machine the
    path becomes a link to the cached content."""
    for path, ref in volumes.items():
        if not (isinstance(path, str) and os.path.isabs(path) and _is_ref(ref)):
            raise ValueError(f"volume {path!r} must map an absolute path to a data ref")
        in_place = fused_path(ref)
        if in_place is None:
            materialize(ref, Path(path))
        elif not ref["uri"].startswith("gs://"):
            os.symlink(in_place, path, target_is_directory=bool(ref.get("is_dir")))


# --- result ----------------------------------------------------------------------------------------


def _round_trips(value: Any) -> bool:
    try:
        cloudpickle.loads(cloudpickle.dumps(value))
    except Exception:
        return False
    return True


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a broken __repr__ must not lose the report
        return f"<{type(value).__qualname__} object; repr failed: {exc!r}>"


def portable_exception(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RuntimeError carrying its type and message."""
    if _round_trips(exc):
        return exc
    return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")


def encode_result(outcome: dict[str, Any]) -> bytes:
    """Pickle the result payload; an unpicklable return value turns it into an upload-phase failure."""
    if outcome["exception"] is not None:
        outcome["exception"] = portable_exception(outcome["exception"])
    try:
        pickled: bytes = cloudpickle.dumps(outcome)  # cloudpickle ships no type hints
        return pickled
    except Exception as exc:
        value = outcome["result"]
        kind = type(value).__qualname__
        error = RuntimeError(f"the return value of type {kind} could not be pickled: {exc}")
        log(f"phase upload FAILED: {error}")
        outcome.update(
            success=False,
            result=None,
            exception=error,
            traceback=_format_exc(exc),
            phase="upload",
            serialization_failed=True,
            result_repr=_safe_repr(value),
        )
        pickled = cloudpickle.dumps(outcome)
        return pickled


def summary(outcome: dict[str, Any]) -> dict[str, Any]:
    """A JSON-ready digest of the outcome beside the pickle, so schedulers and consoles can show why a job
    failed without unpickling objects whose classes they may not have."""
    exc = outcome["exception"]
    return {
        "success": outcome["success"],
        "phase": outcome["phase"],
        "host_index": outcome["host_index"],
        "error_type": None if exc is None else type(exc).__name__,
        "error": None if exc is None else str(exc)[:2000],
        "serialization_failed": bool(outcome.get("serialization_failed")),
    }


# --- the run ---------------------------------------------------------------------------------------


_parser: Any = None


def warm_up() -> None:
    """Build once what every run would otherwise build for itself: a warm fork server calls this in its
    template, so each forked job skips the parser's construction (its regexes and message catalogue
    lookups) and the codec lookup that reading an archive's member names needs."""
    import codecs

    sample = [f"--{name}=x" for name in ("payload", "context", "result", "payload-sha256", "context-sha256")]
    _argument_parser().parse_args(sample)  # parsing compiles and caches regexes of its own
    codecs.lookup("cp437")  # zipfile decodes names without the UTF-8 flag as cp437


def _argument_parser() -> Any:
    global _parser
    if _parser is None:
        import argparse

        _parser = argparse.ArgumentParser(prog="remote_runner.py", description="Run one kinetic job.")
        for flag in ("--payload", "--context", "--result", "--payload-sha256", "--context-sha256"):
            _parser.add_argument(flag, required=True)
        _parser.add_argument("--requirements")
        _parser.add_argument("--workdir")
    return _parser


def _parse_args(argv: list[str]) -> Any:
    args = _argument_parser().parse_args(argv)
    # Resolve local paths now: the job will change directory before the result is written.
    for field in ("payload", "context", "result", "requirements"):
        uri = getattr(args, field)
        if uri and not uri.startswith("gs://"):
            setattr(args, field, os.path.abspath(uri))
    return args


def _host_index() -> int:
    raw = os.environ.get("TPU_WORKER_ID", "0") or "0"
    if not raw.isdigit():
        raise ValueError(f"TPU_WORKER_ID={raw!r} is not a non-negative integer")
    return int(raw)


def _install(requirements: Path) -> None:
    _install_packages(["-r", str(requirements)], "-r requirements")


def _install_packages(what: list[str], label: str) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", *what],
        capture_output=True,
        text=True,
    )
    sys.stderr.write(done.stdout + done.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"pip install {label} failed (exit {done.returncode}): {last}")


def run_job(args: Any, workdir: Path) -> Any:
    """Run every phase in order and return the function's value; a failure raises PhaseError."""
    downloads = workdir / "download"
    with _Phase("download"):
        payload_bytes = fetch_payload(args.payload, downloads / "payload.pkl")
        context_file = fetched_file(args.context, downloads / "context.zip")
        if args.requirements:
            fetch(args.requirements, downloads / "requirements.txt")
    with _Phase("verify"):
        _check_digest("payload", hashlib.sha256(payload_bytes).hexdigest(), args.payload_sha256)
        _check_digest("context", _sha256_file(context_file), args.context_sha256)
    if args.requirements:
        with _Phase("install"):
            _install(downloads / "requirements.txt")
    code_dir = workdir / "code"
    with _Phase("extract"):
        plan = extract(context_file, code_dir)
    with _Phase("unpickle"):
        payload = load_payload(payload_bytes)
    with _Phase("environment"):
        output_dir = Path(os.environ.get("KINETIC_OUTPUT_DIR") or workdir / "output")
        apply_environment(code_dir, plan, payload["env_vars"], output_dir)
    with _Phase("data"):
        resolver = DataResolver(workdir / "data")
        args_, kwargs = resolver.replace(list(payload["args"])), resolver.replace(payload["kwargs"])
        mount_volumes(payload["volumes"])
    func: Callable[..., Any] = payload["func"]
    attached = False
    if os.environ.get("KINETIC_DEBUG") == "1":
        with _Phase("debug"):
            attached = start_debugger(sibling_uri(args.result, "debug.json"), code_dir)
    log(f"phase execute: calling {getattr(func, '__qualname__', func)!s}")
    with _Phase("execute"):
        if attached:
            import debugpy

            debugpy.breakpoint()  # the debugger stops here: step into the function (F11) or over it (F10)
        return func(*args_, **kwargs)


def start_debugger(ready_uri: str, code_dir: Path) -> bool:
    """Listen with debugpy (installed first if the image lacks it), say where in `ready_uri`, and wait up to
    KINETIC_DEBUG_WAIT_TIMEOUT seconds for a debugger; True when one attached (else the job runs on)."""
    import threading

    try:
        import debugpy
    except ImportError:
        _install_packages(["debugpy"], "debugpy")
        import debugpy
    wanted = (os.environ.get("KINETIC_DEBUG_HOST") or "127.0.0.1", int(os.environ.get("KINETIC_DEBUG_PORT") or 5678))
    host, port = debugpy.listen(wanted)
    store(ready_uri, json.dumps({"host": host, "port": port, "remote_root": str(code_dir)}).encode())
    timeout = float(os.environ.get("KINETIC_DEBUG_WAIT_TIMEOUT") or 600)
    log(f"debugpy listening on {host}:{port}; waiting up to {timeout:g} s for a debugger to attach")
    attached = threading.Event()

    def wait() -> None:
        debugpy.wait_for_client()
        attached.set()

    threading.Thread(target=wait, daemon=True).start()
    if attached.wait(timeout):
        log("debugger attached")
        return True
    log(f"no debugger attached within {timeout:g} s; running without one")
    return False


def _environ_bytes() -> dict[bytes, bytes]:
    """A copy of the environment as os.environ holds it (raw bytes): `dict(os.environ)` decodes every
    variable, a tenth of a trivial input's time in a lane, which saves and compares it around each input."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        return dict(data)
    return {os.fsencode(key): os.fsencode(value) for key, value in os.environ.items()}


class _SavedProcessState:
    """Restore cwd, sys.path and os.environ after a run, so `main` can be called in-process safely."""

    def __enter__(self) -> None:
        self.cwd, self.path, self.environ = os.getcwd(), list(sys.path), _environ_bytes()

    def __exit__(self, *_exc: Any) -> None:
        os.chdir(self.cwd)
        sys.path[:] = self.path
        now = _environ_bytes()
        if now != self.environ:  # only what changed: rewriting every variable is not cheap (a lane does this per input)
            for key in now.keys() - self.environ.keys():
                del os.environ[os.fsdecode(key)]
            for key, value in self.environ.items():
                if now.get(key) != value:
                    os.environ[os.fsdecode(key)] = os.fsdecode(value)


def main(argv: list[str] | None = None) -> int:
    """Run one job; 0 on success, 1 when the job failed, 2 on a bad command line."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--lane"] and len(argv) == 2:
        return run_lane(Path(argv[1]))
    try:
        args = _parse_args(argv)
        host = _host_index()
    except SystemExit as exc:
        return int(exc.code or 0)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    if args.workdir:
        workdir = Path(args.workdir).absolute()
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        import tempfile

        workdir = Path(tempfile.mkdtemp(prefix="kinetic-run-"))
    log(f"runner start: host {host}, workdir {workdir}")
    # On success `phase` names the last phase reached; it is only meaningful on failure.
    outcome: dict[str, Any] = {
        "success": True,
        "result": None,
        "exception": None,
        "traceback": "",
        "phase": "upload",
        "host_index": host,
    }
    with _SavedProcessState():
        try:
            outcome["result"] = run_job(args, workdir)
        except PhaseError as failure:
            outcome.update(success=False, exception=failure.cause, traceback=failure.tb, phase=failure.phase)
        sys.stdout.flush()
        data = encode_result(outcome)
    stem = "result" if host == 0 else f"result-worker-{host}"
    payload = host == 0 or not outcome["success"]  # a worker's return value is not wanted, its summary is
    target = (args.result if host == 0 else sibling_uri(args.result, f"{stem}.pkl")) if payload else None
    summary_uri = sibling_uri(args.result, f"{stem}.json")
    try:
        if target is not None:
            store(target, data)
        store(summary_uri, json.dumps(summary(outcome)).encode())
    except Exception as exc:
        log(f"phase upload FAILED: could not write {target or summary_uri}: {type(exc).__name__}: {exc}")
        return 1
    if target is not None:
        log(f"phase upload ok: {target}")
    log("job succeeded" if outcome["success"] else f"job failed in phase {outcome['phase']}")
    return 0 if outcome["success"] else 1


# --- lanes: many inputs of one map in one process (local backend) ------------------------------------
#
# Usage: python remote_runner.py --lane LANE.json, where the lane's spec names the batch artifact (one pickle of
# {"payload": the function's payload, "inputs": [pickled (args, kwargs), ...]}), the context archive, their
# digests and this lane's inputs [[index, job_id, output_dir], ...]. The lane writes, per input, a
# `start` line and then an `end` line (or `skip` when the input was cancelled before it began) to the
# progress file, with the byte offsets of the input's log range and of its result in the results file.
# It checks the cancel list after writing `start`, so a canceller that appends to the list and then
# reads the progress either sees the `start` (and stops the lane) or is seen by the lane (which skips).


def _log_offset() -> int:
    """Where the next log byte of this process goes: stdout and stderr share the lane's log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return os.fstat(2).st_size
    except OSError:
        return 0


class _Lane:
    def __init__(self, spec: dict[str, Any]) -> None:
        # both stay open, unbuffered, for the lane process's whole life: no block can scope them
        self.progress = open(spec["progress"], "ab", buffering=0)  # noqa: SIM115
        self.results = open(spec["results"], "ab", buffering=0)  # noqa: SIM115
        self.result_at = self.results.seek(0, os.SEEK_END)
        self.cancel_path = spec["cancelled"]
        self.cancel_size = 0
        self.cancelled: set[str] = set()

    def note(self, **event: Any) -> None:
        self.progress.write((json.dumps(event) + "\n").encode())

    def is_cancelled(self, job_id: str) -> bool:
        try:
            size = os.stat(self.cancel_path).st_size
        except FileNotFoundError:
            return False
        if size != self.cancel_size:
            with open(self.cancel_path) as f:
                self.cancelled = set(f.read().split())
            self.cancel_size = size
        return job_id in self.cancelled

    def start(self, job_id: str) -> bool:
        """Record that the input begins; False (and a `skip` line) when it was cancelled."""
        self.note(job=job_id, start=time.time(), log=_log_offset())
        if self.is_cancelled(job_id):
            self.note(job=job_id, skip=time.time())
            return False
        return True

    def finish(self, job_id: str, outcome: dict[str, Any]) -> None:
        data = encode_result(outcome)
        at = self.result_at
        self.results.write(data)
        self.result_at += len(data)
        self.note(job=job_id, end=time.time(), log=_log_offset(), at=at, size=len(data), **summary(outcome))


def _prepare_lane(spec: dict[str, Any], workdir: Path) -> tuple[Callable[..., Any], list[bytes]]:
    """The per-lane phases: fetch, verify and extract once, unpickle the function, set up the environment."""
    import pickle

    downloads = workdir / "download"
    with _Phase("download"):
        batch_bytes = fetch_payload(spec["batch"], downloads / "batch.pkl")
        context_file = fetched_file(spec["context"], downloads / "context.zip")
    with _Phase("verify"):
        _check_digest("batch", hashlib.sha256(batch_bytes).hexdigest(), spec["batch_sha256"])
        _check_digest("context", _sha256_file(context_file), spec["context_sha256"])
    code_dir = workdir / "code"
    with _Phase("extract"):
        plan = extract(context_file, code_dir)
    with _Phase("unpickle"):
        batch = pickle.loads(batch_bytes)  # plain bytes inside; verified above
        payload = load_payload(batch["payload"])
    with _Phase("environment"):
        apply_environment(code_dir, plan, payload["env_vars"], Path(spec["inputs"][0][2]))
    return payload["func"], list(batch["inputs"])


def make_dir_and_parent(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)` in the two calls an input's output directory (`JOB/output/`,
    beside its result) takes, without a stat of every level first: a lane makes one per input. One stat
    when it exists already (a map's client makes them ahead while it queues the batch)."""
    path = path.rstrip("/") or "/"
    if os.path.isdir(path):
        return
    for directory in (os.path.dirname(path), path):
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
        except FileNotFoundError:  # a deeper path: the general case
            os.makedirs(path, exist_ok=True)
            return


def _run_input(func: Callable[..., Any], blob: bytes, output_dir: str, resolver: DataResolver) -> Any:
    with _Phase("unpickle", quiet=True):
        args, kwargs = cloudpickle.loads(blob)
    with _Phase("environment", quiet=True):
        make_dir_and_parent(output_dir)
    with _Phase("data", quiet=True):
        args, kwargs = resolver.replace(list(args)), resolver.replace(kwargs)
    with _Phase("execute", quiet=True):
        return func(*args, **kwargs)


def run_lane(spec_path: Path) -> int:
    """Run a lane's inputs in order; each gets its own outcome, so the exit code only says the lane ended
    (0) or could not even start its inputs (1). Module state is shared by the inputs of one lane; cwd,
    sys.path and os.environ are restored after each."""
    spec = json.loads(spec_path.read_text())
    workdir = Path(spec["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    lane = _Lane(spec)
    log(f"lane start: {len(spec['inputs'])} inputs, workdir {workdir}")
    try:
        func, blobs = _prepare_lane(spec, workdir)
    except PhaseError as failure:  # every input fails the way a job would have in that phase
        for _index, job_id, _output in spec["inputs"]:
            if lane.start(job_id):
                lane.finish(
                    job_id,
                    {
                        "success": False,
                        "result": None,
                        "exception": failure.cause,
                        "traceback": failure.tb,
                        "phase": failure.phase,
                        "host_index": 0,
                    },
                )
        return 1
    resolver = DataResolver(workdir / "data")
    name = getattr(func, "__qualname__", func)
    for index, job_id, output_dir in spec["inputs"]:
        if not lane.start(job_id):
            continue
        log(f"input {index} ({job_id}): calling {name!s}")
        outcome: dict[str, Any] = {
            "success": True,
            "result": None,
            "exception": None,
            "traceback": "",
            "phase": "upload",
            "host_index": 0,
        }
        os.environ["KINETIC_JOB_ID"], os.environ["KINETIC_OUTPUT_DIR"] = job_id, output_dir
        with _SavedProcessState():
            try:
                outcome["result"] = _run_input(func, blobs[index], output_dir, resolver)
            except PhaseError as failure:
                outcome.update(success=False, exception=failure.cause, traceback=failure.tb, phase=failure.phase)
        lane.finish(job_id, outcome)
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)  # nobody reads a lane's copies once it is done
    log("lane done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
