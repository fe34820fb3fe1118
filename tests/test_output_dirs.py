"""A map's output directories made ahead by a `mkdir -p` process (core/backends/local/output_dirs.py):
owner-only whatever the client's umask, last input first, and stopped on demand."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kinetic_tui.core.backends.local.output_dirs import OutputDirs
from tests.lifecycle.backend_projects import wait_for


def test_every_directory_and_its_parent_is_made_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"job-{i}" / "output") + "/" for i in range(50)]
    old = os.umask(0o022)
    try:
        OutputDirs(paths)
    finally:
        os.umask(old)
    wait_for(lambda: all(Path(path).is_dir() for path in paths), 10, "every output directory")
    modes = {stat.S_IMODE(Path(path).stat().st_mode) for path in paths}
    modes |= {stat.S_IMODE(Path(path).parent.stat().st_mode) for path in paths}
    assert modes == {0o700}


def test_the_last_input_s_directory_comes_first(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"job-{i}" / "output") for i in range(2000)]
    OutputDirs(paths)
    wait_for(lambda: Path(paths[0]).is_dir(), 10, "the first input's directory, made last")
    assert Path(paths[-1]).stat().st_mtime_ns < Path(paths[0]).stat().st_mtime_ns


def test_undoing_stops_the_process_and_removes_what_it_made_but_not_what_holds_files(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"job-{i}" / "output") for i in range(5000)]
    ahead = OutputDirs(paths)
    wait_for(lambda: Path(paths[-1]).is_dir(), 10, "the first directory")
    (Path(paths[-1]) / "kept.txt").write_text("not ours to remove")
    ahead.undo()
    assert ahead._process is not None and ahead._process.returncode is not None
    assert [p.name for p in tmp_path.iterdir()] == ["job-4999"]
