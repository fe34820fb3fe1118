"""Benchmark context.zip packaging against `zip -qr`, and a cached re-package against the first one.

Goals: cold packaging (walk, zip, SHA-256) <= 1.5x `zip -qr` of the same 5,000-small-file tree;
packaging the unchanged tree again <= 0.2x the cold packaging. Both pairs are measured in this run,
interleaved, and compared by their medians.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kinetic_tui.core.submission.packaging import build_context_zip, make_plan

FILES = 5000
REPEATS = 7


def make_tree(root: Path, files: int = FILES) -> None:
    """Source-like files of 200 B to 4 KiB in 50 packages, like a mid-sized project."""
    rng = random.Random(0)
    words = ["import", "def", "return", "self", "value", "config", "model", "batch", "loss", "step"]
    for i in range(files):
        package = root / f"pkg{i % 50:02d}"
        package.mkdir(exist_ok=True)
        text = " ".join(rng.choice(words) for _ in range(rng.randint(30, 700)))
        (package / f"mod{i:04d}.py").write_text(text)
    (root / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    # Files edited in the last 2 s are also content-hashed for the cache key (coarse mtime clocks);
    # date the tree an hour back, like a project whose last edit was not a moment ago.
    hour_ago = time.time() - 3600
    for path in root.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))


def time_zip_cli(tree: Path, out: Path) -> float:
    out.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run(["zip", "-qr", str(out), "."], cwd=tree, check=True)
    return time.perf_counter() - start


def time_package(tree: Path, dest: Path, home: Path) -> float:
    os.environ["KINETIC_HOME"] = str(home)
    plan = make_plan(tree, tree / "pkg00" / "mod0000.py", cwd=str(tree), sys_path=[str(tree)])
    start = time.perf_counter()
    build_context_zip(tree, dest, plan=plan)
    return time.perf_counter() - start


def main() -> int:
    if shutil.which("zip") is None:
        print("zip is not installed; the baseline cannot be measured")
        return 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "tree"
        tree.mkdir()
        make_tree(tree)
        zip_times, cold_times, warm_times = [], [], []
        for i in range(REPEATS):
            zip_times.append(time_zip_cli(tree, tmp / "baseline.zip"))
            home = tmp / f"home{i}"  # a fresh workspace: nothing cached
            cold_times.append(time_package(tree, tmp / "context.zip", home))
            warm_times.append(time_package(tree, tmp / "context.zip", home))
        zip_med, cold_med, warm_med = (statistics.median(t) for t in (zip_times, cold_times, warm_times))
        print(f"tree: {FILES} files, {REPEATS} interleaved repeats, medians")
        print(f"zip -qr (baseline)            {zip_med * 1000:8.1f} ms")
        print(
            f"build_context_zip, cold       {cold_med * 1000:8.1f} ms   ratio {cold_med / zip_med:.2f}x  (goal <= 1.5x)"
        )
        print(
            f"build_context_zip, unchanged  {warm_med * 1000:8.1f} ms   ratio {warm_med / cold_med:.3f}x "
            f"of cold (goal <= 0.2x)"
        )
        print(
            f"archive sizes: zip -qr {(tmp / 'baseline.zip').stat().st_size / 1e6:.2f} MB, "
            f"context.zip {(tmp / 'context.zip').stat().st_size / 1e6:.2f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
