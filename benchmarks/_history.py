"""A workspace with a long history, made fast: one real job, then N - 1 finished copies of it.

The real job runs through the local backend (Console -> fork server -> runner), so its store row and its
files are exactly what the backend writes. Each copy gets its own job id, times spread backwards over
`SPAN_DAYS`, a status cycling through ENDED, and the real job's files under its own directories: a file
that names the job (handle.json, ...) is rewritten with the copy's id, any other file is hard-linked to the
real one (same bytes, no data written), so 100,000 jobs take about a minute instead of hours. `du` counts a
hard-linked file once, so the size per job is measured on the real job's directories (`job_bytes`).
Test data for benchmarks only.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import time
from pathlib import Path

SPAN_DAYS = 100.0
ENDED = ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED")
BATCH = 5_000


def _tree(root: Path) -> tuple[list[str], list[tuple[str, bytes | None, Path]]]:
    """The directories and files under `root` (relative), each file with its bytes when they name the job."""
    dirs, files = [], []
    job_id = root.name
    for here, subdirs, names in os.walk(root):
        rel = os.path.relpath(here, root)
        dirs += [os.path.normpath(os.path.join(rel, d)) for d in subdirs]
        for name in names:
            path = Path(here) / name
            data = path.read_bytes()
            files.append((os.path.normpath(os.path.join(rel, name)), data if job_id.encode() in data else None, path))
    return sorted(dirs, key=len), files


def _copy_tree(tree: tuple[list[str], list[tuple[str, bytes | None, Path]]], real: str, dest: Path) -> None:
    dirs, files = tree
    os.mkdir(dest, 0o700)
    for rel in dirs:
        os.mkdir(dest / rel, 0o700)
    for index, (rel, data, source) in enumerate(files):
        target = dest / rel.replace(real, dest.name)
        if data is None:
            try:
                os.link(source, target)
            except OSError as exc:  # the file system's limit of links to one file: start a new original
                if exc.errno != errno.EMLINK:
                    raise
                shutil.copyfile(source, target)
                files[index] = (rel, data, target)
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.replace(real.encode(), dest.name.encode()))


def du(path: Path) -> int:
    """Bytes on disk under `path` (allocated blocks, each hard-linked file once)."""
    seen, total = set(), 0
    for here, _, names in os.walk(path):
        for name in [".", *names]:
            st = os.lstat(os.path.join(here, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def fill_history(home: Path, jobs: int, ref: str = "bench_user:square") -> dict[str, float]:
    """Fill `home` with `jobs` finished jobs (one real, the rest copies); return what one job costs on disk
    (`job_bytes`: its directories, `row_bytes`: state.db per job) and how long the fill took."""
    from kinetic_tui.core.backends.local.backend import job_dir_for
    from kinetic_tui.core.backends.local.launcher import shutdown_server
    from kinetic_tui.core.console import Console

    started = time.perf_counter()
    console = Console(home=home, default_wait=False)
    real = asyncio.run(console.jobs.submit(ref, args=[3], name="real", wait=True)).job_id
    console.workspace.run(shutdown_server)  # the fork server of `home`, which the job started
    store = console.workspace.store
    columns = "pool, nodes, status, phase, detail, created_at, started_at, finished_at, hosts, handle, launch"
    row = store.query(f"SELECT {columns} FROM jobs WHERE job_id = ?", (real,))[0]
    job_dir = console.workspace.run(job_dir_for, real)
    handle = json.loads(row[9])
    bucket_dir = Path(handle["result_uri"]).parent
    trees = [(_tree(job_dir), job_dir.parent), (_tree(bucket_dir), bucket_dir.parent)]
    job_bytes = du(job_dir) + du(bucket_dir)
    db_before = (home / "state.db").stat().st_size
    now, step = time.time(), SPAN_DAYS * 86400 / max(jobs, 1)
    for first in range(0, jobs - 1, BATCH):
        rows = []
        for n in range(first, min(first + BATCH, jobs - 1)):
            job_id = f"job-{0xA0000000 + n:08x}"
            created = now - (jobs - n) * step
            status = ENDED[n % len(ENDED)]
            text = [value.replace(real, job_id) if isinstance(value, str) else value for value in row]
            handle_json = json.loads(text[9])
            handle_json.update(display_name=f"history {n}", submitted_at=created)
            rows.append(
                (
                    job_id,
                    text[0],
                    text[1],
                    status,
                    "execute" if status == "FAILED" else None,
                    "cancelled" if status == "CANCELLED" else None,
                    created,
                    created + 0.01,
                    created + 0.1 + n % 300,
                    text[8],
                    json.dumps(handle_json),
                    text[10],
                )
            )
            for tree, parent in trees:
                _copy_tree(tree, real, parent / job_id)
        with store.transaction() as conn:
            conn.executemany(
                "INSERT INTO jobs (job_id, backend, pool, nodes, status, phase, detail, created_at, started_at, "
                "finished_at, hosts, handle, launch) VALUES (?, 'local', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
    # the real job is the newest: move it after the copies so `seq` order stays submission order
    with store.transaction() as conn:
        conn.execute("UPDATE jobs SET seq = (SELECT MAX(seq) + 1 FROM jobs) WHERE job_id = ?", (real,))
    assert store.query("SELECT COUNT(*) FROM jobs")[0][0] == jobs
    store.close()
    db_after = (home / "state.db").stat().st_size
    return {
        "job_bytes": job_bytes,
        "row_bytes": (db_after - db_before) / max(jobs - 1, 1),
        "db_bytes": db_after,
        "fill_seconds": time.perf_counter() - started,
    }
