"""The tail of a big log vs a small one: `JobHandle.tail(5)` and `kinetic-tui logs JOB --tail 5`.

Two finished local jobs print their own logs: 2,000,000 lines (~107 MB) and 100 lines. Baselines,
measured interleaved in the same run: `tail(5)` of the 100-line log (goal for the 2M-line log: <= 2x),
and the peak RSS of a `kinetic-tui logs JOB --tail 5` process on the 100-line log (goal for the 2M-line
log: <= 50 MB more). Peak RSS is each child's own ru_maxrss, from os.wait4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _workspace import fresh_workspace, median_ms, timed, user_module

ROUNDS = 25
RSS_ROUNDS = 5
BIG, SMALL = 2_000_000, 100

CHATTY = """

def chatty(n):
    for i in range(n):
        print(f"step {i:07d} loss {1 / (i + 1):.6f} lr 0.000300 grad {i % 977 / 100:8.4f}")
    return n
"""


def cli_peak_rss_mb(job_id: str) -> float:
    """Peak RSS of one `kinetic-tui logs JOB --tail 5` process (its own, not its siblings')."""
    cli = Path(sys.executable).with_name("kinetic-tui")
    proc = subprocess.Popen([str(cli), "logs", job_id, "--tail", "5"], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"kinetic-tui logs {job_id} --tail 5 exited {proc.returncode}")
    return usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    project = fresh_workspace("kinetic-bench-tail-")
    with open(project / "bench_user.py", "a") as fh:
        fh.write(CHATTY)
    import kinetic_tui as kinetic
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.backends.local.workspace import local_backend

    remote = kinetic.run()(user_module().chatty)
    big, small = remote.run_async(BIG), remote.run_async(SMALL)
    assert big.result(timeout=600, cleanup=False) == BIG and small.result(timeout=60, cleanup=False) == SMALL
    launcher.shutdown_server()
    size = launcher.log_path(local_backend().job(big.job_id).job_dir, 0).stat().st_size
    assert big.tail(5)[-1] == "[kinetic] job succeeded" and len(small.tail(1000)) > SMALL

    small_t, big_t = [], []
    for _ in range(ROUNDS):
        small_t.append(timed(lambda: small.tail(5)))
        big_t.append(timed(lambda: big.tail(5)))
    small_rss, big_rss = [], []
    for _ in range(RSS_ROUNDS):
        small_rss.append(cli_peak_rss_mb(small.job_id))
        big_rss.append(cli_peak_rss_mb(big.job_id))
    s, b = median_ms(small_t), median_ms(big_t)
    sr, br = sorted(small_rss)[RSS_ROUNDS // 2], sorted(big_rss)[RSS_ROUNDS // 2]
    print(f"logs: {BIG:,} lines ({size / 1e6:.0f} MB) and {SMALL} lines, finished local jobs")
    print(f"baseline JobHandle.tail(5), {SMALL}-line log: {s:.2f} ms (median of {ROUNDS})")
    print(f"JobHandle.tail(5), {BIG:,}-line log:      {b:.2f} ms  ratio {b / s:.2f}x  goal <= 2x")
    print(f"baseline peak RSS, `logs JOB --tail 5`, {SMALL}-line log: {sr:.1f} MB (median of {RSS_ROUNDS})")
    print(
        f"peak RSS, `logs JOB --tail 5`, {BIG:,}-line log:      {br:.1f} MB  "
        f"growth {br - sr:+.1f} MB  ratio {br / sr:.2f}x  goal <= +50 MB"
    )


if __name__ == "__main__":
    main()
