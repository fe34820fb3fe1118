"""Job packaging (SPEC 2.3 steps 3-5): package root, context.zip with plan.json, payload.pkl, env capture.

The archive step is on every submission's critical path, so it walks with `os.scandir`, stores small
files uncompressed, and caches finished archives by a stat signature of the tree: resubmitting an
unchanged project costs one stat walk instead of a re-zip.
"""
from __future__ import annotations

import collections
import contextlib
import fnmatch
import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import pickle
import platform
import re
import shutil
import stat
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import cloudpickle

from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.paths import kinetic_home

ROOT_MARKERS = ("pyproject.toml", "requirements.txt", "setup.py", "setup.cfg", ".git")
ALWAYS_EXCLUDED = frozenset({".git", "__pycache__"})
DEFAULT_EXCLUDED = frozenset({".venv", "venv", "node_modules", ".tox", ".mypy_cache", ".ruff_cache",
                              ".pytest_cache", ".ipynb_checkpoints", ".DS_Store"})
IGNORE_FILE = ".kineticignore"
PLAN_ARCNAME = ".kinetic/plan.json"
_CACHE_FORMAT = "context-v1"
_CACHE_KEEP = 8
_RACY_NS = 2_000_000_000  # wider than any common filesystem's mtime granularity
# Below 1 KiB deflate saves little next to the per-entry overhead; above it, level 1 keeps the archive
# near `zip -qr` size (fewer upload bytes) at a small CPU cost (benchmarks/bench_packaging.py).
_STORE_BELOW = 1024
_STREAM_ABOVE = 8 * 1024 * 1024
_INCOMPRESSIBLE = frozenset({".zip", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".whl", ".jar", ".png",
                             ".jpg", ".jpeg", ".gif", ".webp", ".mp3", ".mp4", ".npz", ".pt", ".safetensors"})
_ZIP_EPOCH = time.mktime((1980, 1, 1, 0, 0, 0, 0, 0, -1))


class PayloadError(KineticError):
    """The function or one of its arguments cannot be pickled; the message names which."""


class SensitiveEnvWarning(UserWarning):
    """A captured environment variable looks like a secret; its value travels inside the payload."""


# ---------------------------------------------------------------------------------------------- root

def find_package_root(module_file: str | os.PathLike[str], home: Path | None = None) -> Path:
    """Return the directory to ship for code defined in `module_file`.

    Walk up out of every package (directories with `__init__.py`), then up to the nearest directory
    holding one of ROOT_MARKERS; the walk never goes above `home` (default `Path.home()`) when the module
    lives under it, nor above `/`. When no marker is found, the directory reached after leaving the
    packages is the root, so a loose script ships its own directory. `KINETIC_PACKAGE_ROOT` overrides.
    """
    override = os.environ.get("KINETIC_PACKAGE_ROOT")
    if override:
        root = Path(override).expanduser().resolve()
        if not root.is_dir():
            raise ValidationError(f"KINETIC_PACKAGE_ROOT={override!r} is not a directory")
        return root
    start = Path(module_file).resolve().parent
    home = (home or Path.home()).resolve()
    ceiling = home if start == home or home in start.parents else Path(start.anchor)
    top = start
    while top != ceiling and (top / "__init__.py").is_file():
        top = top.parent
    for candidate in (top, *top.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
        if candidate == ceiling:
            break
    return top


def is_installed(module_file: str | os.PathLike[str]) -> bool:
    """True for a module inside the interpreter's prefixes (site-packages, the standard library)."""
    return os.path.realpath(module_file).startswith(_interpreter_dirs())


def make_plan(root: Path, entry_file: str | os.PathLike[str] | None, *, cwd: str | None = None,
              sys_path: Sequence[str] | None = None) -> dict[str, Any]:
    """Build plan.json: how the runner recreates the client's imports and cwd inside the extracted root.

    `package_root` is the client's absolute root (informational); the other paths are relative to it,
    `None` when outside it. `sys_path_rel` keeps the order of `sys.path` (default: the current one).
    """
    root = Path(root).resolve()
    cwd = cwd if cwd is not None else os.getcwd()
    rels = []
    for entry in sys.path if sys_path is None else sys_path:
        rel = _rel_under(entry or cwd, root)
        if rel is not None and rel not in rels:
            rels.append(rel)
    return {
        "package_root": str(root),
        "entry_rel": _rel_under(entry_file, root) if entry_file is not None else None,
        "client_cwd_rel": _rel_under(cwd, root),
        "sys_path_rel": rels,
    }


def _rel_under(path: str | os.PathLike[str], root: Path) -> str | None:
    resolved = Path(path).resolve()
    if resolved != root and root not in resolved.parents:
        return None
    return resolved.relative_to(root).as_posix()


# ---------------------------------------------------------------------------------------- context.zip

class _Exclusions:
    """Everything that keeps a path out of context.zip, decided without any extra system call."""

    def __init__(self, root: str, exclude_paths: Iterable[str | os.PathLike[str]]) -> None:
        names = set(ALWAYS_EXCLUDED)
        if os.environ.get("KINETIC_NO_DEFAULT_EXCLUDES") != "1":
            names |= DEFAULT_EXCLUDED
        self.names = frozenset(names)
        paths = {str(Path(p).resolve()) for p in exclude_paths}
        home = str(kinetic_home().resolve())
        if home.startswith(os.path.join(root, "")):
            paths.add(home)  # never ship the workspace (state.db, local buckets) when it sits in the root
        self.paths = frozenset(paths)
        self.patterns = _read_ignore_file(os.path.join(root, IGNORE_FILE))
        self.any_re, self.dir_re = (_compile(self.patterns, dir_only) for dir_only in (False, True))

    def excluded(self, name: str, rel: str, path: str, is_dir: bool) -> bool:
        if name in self.names or path in self.paths or rel == PLAN_ARCNAME:
            return True
        if self.any_re is not None and self.any_re.match(rel):
            return True
        return is_dir and self.dir_re is not None and self.dir_re.match(rel) is not None

    def fingerprint(self) -> list[Any]:
        return [sorted(self.names), sorted(self.paths), self.patterns]


def _read_ignore_file(path: str) -> list[tuple[str, bool]]:
    """(pattern, dir_only) per line; `#` starts a comment line, a trailing `/` matches directories only."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    stripped = (line.strip() for line in lines)
    return [(line.rstrip("/"), line.endswith("/")) for line in stripped
            if line and not line.startswith("#") and line.rstrip("/")]


def _compile(patterns: list[tuple[str, bool]], dir_only: bool) -> re.Pattern[str] | None:
    """Match root-relative paths the way .gitignore anchors: a pattern with a `/` (a leading one included)
    is matched against the whole relpath, one without a `/` against the basename at any depth."""
    chosen = []
    for pattern, only in patterns:
        if only != dir_only:
            continue
        if "/" in pattern:
            chosen.append(fnmatch.translate(pattern.lstrip("/")))
        else:
            chosen.append("(?:.*/)?" + fnmatch.translate(pattern))
    return re.compile("|".join(f"(?:{p})" for p in chosen)) if chosen else None


def _scan(root: str, rules: _Exclusions) -> list[tuple[str, str, os.stat_result]]:
    """(relpath, path, stat) of every regular file to ship, sorted; symlinked directories are skipped."""
    files = []
    stack = [("", root)]
    while stack:
        rel_dir, abs_dir = stack.pop()
        with os.scandir(abs_dir) as entries:
            for entry in entries:
                rel = rel_dir + entry.name
                is_dir = entry.is_dir(follow_symlinks=False)
                if rules.excluded(entry.name, rel, entry.path, is_dir):
                    continue
                if is_dir:
                    stack.append((rel + "/", entry.path))
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue  # a broken symlink
                if stat.S_ISREG(st.st_mode):
                    files.append((rel, entry.path, st))
    files.sort(key=lambda item: item[0])
    return files


def build_context_zip(root: str | os.PathLike[str], dest: str | os.PathLike[str],
                      exclude_paths: Iterable[str | os.PathLike[str]] = (), *,
                      plan: Mapping[str, Any]) -> tuple[Path, str]:
    """Write the package root (minus exclusions) plus `.kinetic/plan.json` to `dest`.

    Returns `(dest, sha256 hex of the archive)`. Archives are cached under
    `kinetic_home()/cache/context/` keyed by a stat walk (relpath, size, mtime_ns, mode; plus the
    content digest of files modified in the last 2 s), the plan and the exclusions; a hit hard-links (or copies) the cached archive to `dest`, so treat `dest` as
    read-only. Entries are sorted, so the same tree yields the same bytes. Only regular files are
    shipped (symlinked files by content; symlinked directories and empty directories are skipped).
    """
    root_str = str(Path(root).resolve())
    if not os.path.isdir(root_str):
        raise ValidationError(f"package root {str(root)!r} is not a directory")
    rules = _Exclusions(root_str, exclude_paths)
    scan_started_ns = time.time_ns()
    files = _scan(root_str, rules)
    plan_bytes = json.dumps(dict(plan), sort_keys=True, indent=2).encode()
    key = _signature(root_str, files, plan_bytes, rules, scan_started_ns)
    cache = kinetic_home() / "cache" / "context"
    cached_zip, cached_sha = cache / f"{key}.zip", cache / f"{key}.sha256"
    try:
        digest = cached_sha.read_text().strip()
        os.utime(cached_zip)  # keeps it among the most recent for pruning; raises if the zip is gone
    except FileNotFoundError:
        cache.mkdir(parents=True, exist_ok=True)
        digest = _write_cache_entry(cached_zip, cached_sha, files, plan_bytes)
        _prune(cache)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _link_or_copy(cached_zip, dest)
    return dest, digest


def _signature(root: str, files: list[tuple[str, str, os.stat_result]], plan_bytes: bytes,
               rules: _Exclusions, scan_started_ns: int) -> str:
    """Cache key. A file modified within _RACY_NS of the scan could change again without its (size,
    mtime) changing (coarse filesystem clocks), so its content digest joins the key, as git does."""
    digest = hashlib.sha256(json.dumps([_CACHE_FORMAT, root, rules.fingerprint()]).encode() + plan_bytes)
    racy_after = scan_started_ns - _RACY_NS
    lines = []
    for rel, path, st in files:
        content = _sha256_file(path) if st.st_mtime_ns >= racy_after else ""
        lines.append(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\0{content}\n")
    digest.update("".join(lines).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_cache_entry(zip_path: Path, sha_path: Path, files: list[tuple[str, str, os.stat_result]],
                       plan_bytes: bytes) -> str:
    """Write zip and its digest via temp files; the zip is renamed last so its presence means complete."""
    fd, tmp = tempfile.mkstemp(dir=zip_path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            out = _HashingWriter(fh)
            _write_zip(out, files, plan_bytes)
        digest = out.sha256.hexdigest()
        _atomic_write(sha_path, digest.encode())
        os.replace(tmp, zip_path)
    except BaseException:
        os.unlink(tmp)
        raise
    return digest


def _write_zip(fh: _HashingWriter, files: list[tuple[str, str, os.stat_result]], plan_bytes: bytes) -> None:
    with zipfile.ZipFile(fh, "w", allowZip64=True) as archive:
        for rel, path, st in files:
            info = zipfile.ZipInfo(rel, time.localtime(max(st.st_mtime, _ZIP_EPOCH))[:6])
            info.external_attr = (st.st_mode & 0xFFFF) << 16
            if st.st_size > _STREAM_ABOVE:  # streamed and stored: big files are mostly weights or archives
                info.file_size = st.st_size
                with open(path, "rb") as src, archive.open(info, "w", force_zip64=True) as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                continue
            with open(path, "rb") as src:
                data = src.read()
            if st.st_size >= _STORE_BELOW and os.path.splitext(rel)[1].lower() not in _INCOMPRESSIBLE:
                archive.writestr(info, data, zipfile.ZIP_DEFLATED, compresslevel=1)
            else:
                archive.writestr(info, data)
        plan_info = zipfile.ZipInfo(PLAN_ARCNAME)
        plan_info.external_attr = 0o100644 << 16
        archive.writestr(plan_info, plan_bytes)


class _HashingWriter:
    """An unseekable sink that hashes what passes through.

    Without `seek`, zipfile writes each local header once and appends a data descriptor instead of
    seeking back to patch sizes (three flushing seeks per member), and the archive's SHA-256 comes
    for free instead of re-reading the file.
    """

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self._written = 0
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self._written += len(data)
        return self._fh.write(data)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        self._fh.flush()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _link_or_copy(src: Path, dest: Path) -> None:
    if dest.exists() and os.path.samefile(src, dest):
        return  # renaming a hard link over its twin would be a no-op that leaves the temp name behind
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _prune(cache: Path) -> None:
    """Keep only the most recently used archives; the cache must not grow with every edit."""
    def last_used(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except FileNotFoundError:  # pruned meanwhile by another process
            return 0

    for old in sorted(cache.glob("*.zip"), key=last_used, reverse=True)[_CACHE_KEEP:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".sha256").unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------ payload

_BY_VALUE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def client_fingerprint() -> dict[str, str]:
    """Versions the runner compares against its own to explain unpickling failures."""
    try:
        kinetic = importlib.metadata.version("kinetic-tui")
    except importlib.metadata.PackageNotFoundError:
        kinetic = "unknown"
    return {"python": platform.python_version(), "cloudpickle": cloudpickle.__version__, "kinetic": kinetic}


def build_payload(func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any],
                  env_vars: Mapping[str, str], volumes: Mapping[str, Any],
                  package_root: str | os.PathLike[str]) -> bytes:
    """Cloudpickle the payload with every module under `package_root` pickled by value.

    By-value pickling lets the job run even where the project is not importable (only context.zip is
    there, and it may not be on sys.path at unpickling time). `args`, `kwargs` and `volumes` must already
    have their `Data` replaced by refs (core.data.replace_data_refs). Modules inside the interpreter's
    prefixes (a venv inside the root) stay by reference.
    """
    payload = {"func": func, "args": tuple(args), "kwargs": dict(kwargs), "env_vars": dict(env_vars),
               "volumes": dict(volumes), "client_fingerprint": client_fingerprint()}
    root = Path(package_root).resolve()
    with _project_by_value(root):
        try:
            return _dumps_keeping_filenames(payload, root)
        except Exception as exc:
            raise PayloadError(_explain_pickle_failure(func, payload["args"], payload["kwargs"], exc)) from exc


def build_batch(func: Callable[..., Any], calls: Sequence[tuple[Sequence[Any], Mapping[str, Any]]],
                env_vars: Mapping[str, str], package_root: str | os.PathLike[str]) -> bytes:
    """The one artifact of a map's lanes: the function's payload once, and each input's (args, kwargs)
    pickled on its own, the same way (by value, Data already replaced by refs).

    A lane unpickles the function once and each input as it reaches it, so one bad input fails only its
    own job. PayloadError names the input that cannot be pickled (`input 3: argument 'x' ...`).
    """
    root = Path(package_root).resolve()
    payload = build_payload(func, (), {}, env_vars, {}, root)
    inputs = []
    with _project_by_value(root):
        for index, (args, kwargs) in enumerate(calls):
            try:
                inputs.append(_dumps_keeping_filenames((tuple(args), dict(kwargs)), root))
            except Exception as exc:
                raise PayloadError(f"input {index}: {_explain_pickle_failure(func, tuple(args), dict(kwargs), exc)}") \
                    from exc
    return pickle.dumps({"payload": payload, "inputs": inputs}, protocol=pickle.HIGHEST_PROTOCOL)


@contextlib.contextmanager
def _project_by_value(root: Path) -> Iterator[None]:
    """Pickle every module under the package root by value while the block runs."""
    with _BY_VALUE_LOCK:
        registered = _register_by_value(root)
        try:
            yield
        finally:
            for module in registered:
                cloudpickle.unregister_pickle_by_value(module)


def _dumps_keeping_filenames(payload: Any, root: Path) -> bytes:
    """cloudpickle.dumps, except that by-value code keeps its file name relative to the package root.

    cloudpickle replaces every co_filename with "<dynamic-code>", which leaves remote tracebacks without
    file names or source lines. A root-relative name resolves against the extracted archive on the job's
    sys.path, so `linecache` finds the source and the traceback reads like a local one.
    """
    import io
    import types

    from cloudpickle import cloudpickle as impl

    inside = os.path.join(str(root), "")

    def reduce_code(code: types.CodeType) -> Any:
        rebuild, args = impl._code_reduce(code)
        name = code.co_filename
        if name.startswith(inside):
            name = name[len(inside):]
        return rebuild, tuple(name if arg == "<dynamic-code>" else arg for arg in args)

    class Pickler(cloudpickle.Pickler):  # the C pickler reads dispatch_table once, at construction
        dispatch_table = collections.ChainMap({types.CodeType: reduce_code}, cloudpickle.Pickler.dispatch_table)

    buffer = io.BytesIO()
    Pickler(buffer, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(payload)
    return buffer.getvalue()


@functools.lru_cache(maxsize=1)
def _interpreter_dirs() -> tuple[str, ...]:
    return tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})


# realpath per module directory, kept for the process: resolving them is most of a payload's cost on a
# slow filesystem, and a module's directory does not move while it is imported
_REAL_DIRS: dict[str, str] = {}


def _register_by_value(root: Path) -> list[Any]:
    already = set(cloudpickle.list_registry_pickle_by_value())
    inside = os.path.join(str(root), "")
    interpreter = _interpreter_dirs()
    real_dirs = _REAL_DIRS
    registered = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == "__main__" or name in already:
            continue
        directory = os.path.dirname(os.path.abspath(file))
        if directory not in real_dirs:
            real_dirs[directory] = os.path.realpath(directory) + os.sep
        real = real_dirs[directory]
        if real.startswith(inside) and not real.startswith(interpreter):
            cloudpickle.register_pickle_by_value(module)
            registered.append(module)
    return registered


def _explain_pickle_failure(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                            exc: Exception) -> str:
    """Pickle the parts one by one so the message names the culprit instead of the whole payload."""
    names = _positional_names(func)
    parts: list[tuple[str, Any]] = [(f"function {getattr(func, '__qualname__', func)!r}", func)]
    parts += [(f"argument {names[i]!r} (args[{i}])" if i < len(names) else f"argument args[{i}]", value)
              for i, value in enumerate(args)]
    parts += [(f"argument {key!r} (kwargs[{key!r}])", value) for key, value in kwargs.items()]
    for label, value in parts:
        try:
            cloudpickle.dumps(value)
        except Exception as part_exc:
            return f"{label} cannot be pickled: {type(part_exc).__name__}: {part_exc}"
    return f"the payload cannot be pickled: {type(exc).__name__}: {exc}"


def _positional_names(func: Callable[..., Any]) -> list[str]:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


# ---------------------------------------------------------------------------------------------- env

NEVER_WILDCARD = ("PATH", "HOME", "PYTHONPATH", "LD_*", "VIRTUAL_ENV", "CONDA_*", "SHELL", "TMP*", "USER",
                  "SSH_AUTH_SOCK")
SENSITIVE_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "CREDENTIAL")


def capture_env(patterns: Iterable[str] | None) -> tuple[dict[str, str], list[str]]:
    """Return `(captured vars, warning messages)` for exact names and `PREFIX*` patterns.

    Wildcards never capture the machine-specific variables in NEVER_WILDCARD (an exact name still
    does: it was asked for). Each captured name that looks like a secret is also reported with
    `warnings.warn(..., SensitiveEnvWarning)`; a missing exact name is only listed in the messages.
    """
    if patterns is None:
        return {}, []
    if isinstance(patterns, (str, bytes)):
        raise ValidationError(f"capture_env_vars must be a list of names or PREFIX* patterns, got the "
                              f"string {patterns!r}")
    patterns = list(patterns)
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
            raise ValidationError(f"capture_env_vars entry {pattern!r} is invalid: use an exact name or "
                                  f"PREFIX* ('*' only at the end)")
    captured: dict[str, str] = {}
    messages = []
    for pattern in patterns:
        if pattern.endswith("*"):
            captured.update((name, value) for name, value in os.environ.items()
                            if name.startswith(pattern[:-1]) and not _never_wildcard(name))
        elif pattern in os.environ:
            captured[pattern] = os.environ[pattern]
        else:
            messages.append(f"capture_env_vars: {pattern!r} is not set and is not captured")
    for name in sorted(captured):
        if any(word in name.upper() for word in SENSITIVE_WORDS):
            message = f"capturing {name!r}, which looks like a secret: its value travels in the job payload"
            warnings.warn(message, SensitiveEnvWarning, stacklevel=2)
            messages.append(message)
    return dict(sorted(captured.items())), messages


def _never_wildcard(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, blocked) for blocked in NEVER_WILDCARD)
