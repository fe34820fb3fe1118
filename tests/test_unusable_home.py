"""A home or store that cannot be used is one line naming the path, exit 1, and nothing on disk changes:
a write lock another process holds, a `state.db` that is a directory, a read-only home, a KINETIC_HOME that
is a file or lies on a read-only disk. Read-only means a read-only bind mount: the suite runs as root, and
chmod stops nothing for root."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import kinetic_tui as kinetic


def _cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinetic_tui", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KINETIC_HOME": str(home), **(env or {})},
        timeout=60,
        check=False,
    )


def _one_line(run: subprocess.CompletedProcess[str], *words: str) -> str:
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode) for p in paths}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    assert _cli(home, "init").returncode == 0
    return home


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """Mount a directory read-only at a new path (a bind mount); skipped where mounting is not permitted."""
    mounts: list[Path] = []

    def mount(source: Path) -> Path:
        target = tmp_path / f"ro-{len(mounts)}"
        target.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command: a read-only home cannot be made here (chmod does not stop root)")
        bind = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True, check=False)
        if bind.returncode != 0:
            pytest.skip(f"mount --bind is not permitted here: {bind.stderr.decode().strip()}")
        mounts.append(target)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True, capture_output=True)
        return target

    yield mount
    for target in reversed(mounts):
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


def test_status_while_another_process_holds_the_write_lock(workspace: Path):
    db = workspace / "state.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        before = _tree(workspace)
        run = _cli(workspace, "status", env={"KINETIC_STORE_TIMEOUT": "0.5"})
        assert _tree(workspace) == before
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _one_line(run, str(db), "locked by another process")


def test_status_when_state_db_is_a_directory(tmp_path: Path):
    home = tmp_path / "home"
    (home / "state.db").mkdir(parents=True, mode=0o700)
    home.chmod(0o700)
    before = _tree(home)
    _one_line(_cli(home, "status"), str(home / "state.db"), "cannot be opened")
    assert _tree(home) == before


@pytest.mark.parametrize(
    "command", [["status"], ["jobs", "list"], ["init"], ["pool", "add", "x", "--accelerator", "cpu", "--nodes", "1"]]
)
def test_a_read_only_home(workspace: Path, read_only, command: list[str]):
    home = read_only(workspace)
    before = _tree(workspace)
    _one_line(_cli(home, *command), str(home))
    assert _tree(workspace) == before


def test_init_with_a_file_for_a_home(tmp_path: Path):
    home = tmp_path / "not-a-dir"
    home.write_text("mine")
    home.chmod(0o644)
    before = _tree(home)
    _one_line(_cli(home, "init"), f"KINETIC_HOME {home} is not a directory")
    assert _tree(home) == before  # not even its mode was touched


def test_init_under_a_read_only_directory(tmp_path: Path, read_only):
    parent = tmp_path / "parent"
    parent.mkdir()
    home = read_only(parent) / "home"
    _one_line(_cli(home, "init"), f"KINETIC_HOME {home} cannot be used (Read-only file system)")
    assert list(parent.iterdir()) == []


@pytest.mark.parametrize("value", [None, 3, b"job-0123abcd", ["job-0123abcd"], "job-0123abcd\n"])
def test_attach_names_a_non_id_argument(value: object):
    with pytest.raises(ValueError, match=r"job id: expected job-<8 hex digits>.*got ") as caught:
        kinetic.attach(value)  # type: ignore[arg-type]
    assert repr(value)[:20] in str(caught.value)
    with pytest.raises(ValueError, match=r"batch id: expected grp-<8 hex digits>"):
        kinetic.attach_batch(value)  # type: ignore[arg-type]
