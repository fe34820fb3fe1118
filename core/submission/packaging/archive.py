"""context.zip: the package root (minus exclusions) plus plan.json, cached by a stat signature of the tree.

The archive step is on every submission's critical path, so it walks with `os.scandir`, stores small
files uncompressed, and caches finished archives by a stat signature of the tree: resubmitting an
unchanged project costs one stat walk instead of a re-zip.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.submission.packaging.plan import PLAN_ARCNAME

ALWAYS_EXCLUDED = frozenset({".git", "__pycache__"})
DEFAULT_EXCLUDED = frozenset(
    {
        ".venv",
        "venv",
        "node_modules",
        ".tox",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".ipynb_checkpoints",
        ".DS_Store",
    }
)
IGNORE_FILE = ".kineticignore"
_CACHE_FORMAT = "context-v1"
_CACHE_KEEP = 8
# An archive used this recently is never pruned: a submission uploads straight from its cache entry.
_IN_USE_NS = 60_000_000_000
_RACY_NS = 2_000_000_000  # wider than any common filesystem's mtime granularity
# Below 1 KiB deflate saves little next to the per-entry overhead; above it, level 1 keeps the archive
# near `zip -qr` size (fewer upload bytes) at a small CPU cost (benchmarks/bench_packaging.py).
_STORE_BELOW = 1024
_STREAM_ABOVE = 8 * 1024 * 1024
_INCOMPRESSIBLE = frozenset(
    {
        ".zip",
        ".gz",
        ".tgz",
        ".bz2",
        ".xz",
        ".zst",
        ".7z",
        ".whl",
        ".jar",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".webp",
        ".mp3",
        ".mp4",
        ".npz",
        ".pt",
        ".safetensors",
    }
)
_ZIP_EPOCH = time.mktime((1980, 1, 1, 0, 0, 0, 0, 0, -1))


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
    return [
        (line.rstrip("/"), line.endswith("/"))
        for line in stripped
        if line and not line.startswith("#") and line.rstrip("/")
    ]


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


def build_context_zip(
    root: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    exclude_paths: Iterable[str | os.PathLike[str]] = (),
    *,
    plan: Mapping[str, Any],
) -> tuple[Path, str]:
    """Write the package root (minus exclusions) plus `.kinetic/plan.json` to `dest`: the cached archive
    (`cached_context_zip`) hard-linked (or copied) there, so treat `dest` as read-only. Returns `(dest,
    sha256 hex of the archive)`."""
    cached_zip, digest = cached_context_zip(root, exclude_paths, plan=plan)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _link_or_copy(cached_zip, dest)
    return dest, digest


def cached_context_zip(
    root: str | os.PathLike[str], exclude_paths: Iterable[str | os.PathLike[str]] = (), *, plan: Mapping[str, Any]
) -> tuple[Path, str]:
    """The archive of the package root (minus exclusions) plus `.kinetic/plan.json`, as its entry in the
    cache, and its sha256 hex. The entry is never rewritten in place and is kept for at least a minute
    after this call, so it can be uploaded (or shared) as it is.

    Archives are cached under `kinetic_home()/cache/context/` keyed by a stat walk (relpath, size,
    mtime_ns, mode; plus the content digest of files modified in the last 2 s), the plan and the
    exclusions. Entries are sorted, so the same tree yields the same bytes. Only regular files are shipped
    (symlinked files by content; symlinked directories and empty directories are skipped).
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
    return cached_zip, digest


def _signature(
    root: str, files: list[tuple[str, str, os.stat_result]], plan_bytes: bytes, rules: _Exclusions, scan_started_ns: int
) -> str:
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


def _write_cache_entry(
    zip_path: Path, sha_path: Path, files: list[tuple[str, str, os.stat_result]], plan_bytes: bytes
) -> str:
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

    def __init__(self, fh: IO[bytes]) -> None:
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

    def close(self) -> None:  # part of the file type ZipFile accepts; it never closes a file it was handed
        self._fh.close()


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
    """Keep only the most recently used archives, and any used within the last minute; the cache must not
    grow with every edit."""

    def last_used(path: Path) -> int:
        try:
            return path.stat().st_mtime_ns
        except FileNotFoundError:  # pruned meanwhile by another process
            return 0

    in_use = time.time_ns() - _IN_USE_NS
    for old in sorted(cache.glob("*.zip"), key=last_used, reverse=True)[_CACHE_KEEP:]:
        if last_used(old) >= in_use:
            continue
        old.unlink(missing_ok=True)
        old.with_suffix(".sha256").unlink(missing_ok=True)
