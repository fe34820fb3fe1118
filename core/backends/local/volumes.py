"""Volumes on the local backend: the data appears at the absolute path for the job's lifetime.

This backend does not use mount namespaces; it creates the path for the job (refusing a path that already
exists on the host), locks it in the store against concurrent jobs (a second job wanting it waits in the
queue), and removes what it created when the job settles. Where the path cannot be created, submit fails
and says to pass the Data as an argument instead.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from kinetic_tui.core.backends.local.job_rows import JobRow, SubmitError
from kinetic_tui.core.store import volume_locks_repo


def _missing_top(target: Path) -> Path:
    """The topmost directory of `target` that does not exist yet: what a job creates and later removes."""
    top = target
    while not top.parent.exists():
        top = top.parent
    return top


def check_volume_path(path: str) -> None:
    """Refuse host paths that exist or cannot be created. Creating is tried for real (then undone): write
    permission bits say nothing for root, nor for read-only mounts and pseudo file systems like /proc."""
    target = Path(path)
    hint = "pass the Data as a function argument instead (it arrives as a local path)"
    if target.exists():
        raise SubmitError(
            f"volume path {path} already exists on this machine and the local backend never "
            f"overwrites host paths; choose a path that does not exist, or {hint}"
        )
    top = _missing_top(target)
    try:
        top.mkdir()
        top.rmdir()
    except OSError as exc:
        raise SubmitError(f"cannot create volume path {path} here ({top}: {exc.strerror}); {hint}") from None


def lock_volumes(conn: sqlite3.Connection, row: JobRow) -> bool:
    """Take every volume path of the job inside the claim's transaction; False (nothing taken) if another
    job holds one of them."""
    paths = row.launch.get("volumes") or []
    for path in paths:
        holder = volume_locks_repo.holder(conn, path)
        if holder is not None and holder != row.job_id:
            return False
    for path in paths:
        volume_locks_repo.lock(conn, path, row.job_id)
    return True


def create_volume_root(path: str) -> str:
    """Return the topmost directory that did not exist (removed again when the job settles)."""
    target = Path(path)
    top = _missing_top(target)
    if target.exists():
        raise SubmitError(f"volume path {path} appeared on the host before the job started; refusing to use it")
    target.parent.mkdir(parents=True, exist_ok=True)
    return str(top)


def remove_volume_roots(job_dir: Path) -> None:
    try:
        created = json.loads((job_dir / "volumes.json").read_text())
    except FileNotFoundError:
        return
    for top in created:
        path = Path(top)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
