"""`kinetic-tui doctor`: each check finds its problem in a real home, `--repair` fixes what it can (a lost
store rebuilt from the jobs' own files, orphans stopped, the supervisor started), and the exit code says
whether anything is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.doctor.checks import examine
from kinetic_tui.core.paths import state_db_path
from kinetic_tui.core.store import Store
from kinetic_tui.core.supervisor import process as supervisor
from tests.lifecycle.backend_projects import client_json, jobs, reap_jobs, start_client, user_project, wait_for

__all__ = ["jobs", "reap_jobs", "user_project"]


def _doctor(home: Path, *args: str) -> tuple[int, dict]:
    run = subprocess.run(
        [sys.executable, "-m", "kinetic_tui", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KINETIC_HOME": str(home)},
        timeout=60,
        check=False,
    )
    assert "Traceback" not in run.stderr, run.stderr
    return run.returncode, json.loads(run.stdout)


def _problems(report: dict) -> dict[str, str]:
    return {c["check"]: c["message"] for c in report["checks"] if not c["ok"]}


def _tree(home: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode)
        for p in home.rglob("*")
        if not p.is_socket()
    }


def _hosts(job_id: str) -> list[HostProcess]:
    with Store(state_db_path()) as store:
        (hosts,) = store.query("SELECT hosts FROM jobs WHERE job_id = ?", (job_id,))[0]
    return [HostProcess.from_dict(h) for h in json.loads(hosts)]


def _running(func, *args) -> str:
    job_id = kinetic.run()(func).run_async(*args).job_id
    wait_for(lambda: kinetic.attach(job_id).status().value == "RUNNING", 30, f"{job_id} running")
    return job_id


@pytest.mark.parametrize("how", ["empty", "missing"])
def test_repair_rebuilds_a_lost_store_from_the_jobs_files(jobs, user_project, kinetic_home: Path, how: str):
    ok = kinetic.run()(jobs.add).run_async(2, 3).job_id
    bad = kinetic.run()(jobs.boom).run_async("no luck").job_id
    wait_for(lambda: all(kinetic.attach(j).status().finished for j in (ok, bad)), 30, "both settled")
    alive = _running(jobs.hold, 60)
    killed = _running(jobs.hold, 60)
    for host in _hosts(killed):
        os.killpg(host.pgid, signal.SIGKILL)
    wait_for(lambda: not any(h.is_alive() for h in _hosts(killed)), 10, "the killed job gone")
    launcher.shutdown_server()  # a lost exit file, as when the fork server dies with the store
    (kinetic_home / "local" / "jobs" / killed / "exit-0").unlink(missing_ok=True)

    db = kinetic_home / "state.db"
    with Store(db) as store:
        store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if how == "empty":
        db.write_bytes(b"")

    refused = subprocess.run(
        [sys.executable, "-m", "kinetic_tui", "jobs", "list"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 1 and "kinetic-tui doctor --repair" in refused.stderr, refused.stderr

    before = _tree(kinetic_home)
    code, report = _doctor(kinetic_home)
    assert code == 1 and "store" in _problems(report), report
    assert "--repair creates it and rebuilds the rows of 4 jobs" in report["checks"][1]["fix"]
    assert _tree(kinetic_home) == before  # looking changed nothing

    code, report = _doctor(kinetic_home, "--repair")
    assert code == 0 and report["clean"], report
    actions = "\n".join(report["actions"])
    assert f"created {db}" in actions
    for job_id, status in ((ok, "SUCCEEDED"), (bad, "FAILED in phase 'execute'"), (killed, "FAILED in phase 'lost'")):
        assert f"rebuilt {job_id} as {status}" in actions, actions
    assert f"rebuilt {alive} as RUNNING" in actions

    seen = client_json(
        user_project[0],
        f"""
        import json, kinetic_tui as kinetic
        ok, bad, alive, killed = (kinetic.attach(j) for j in {[ok, bad, alive, killed]!r})
        try:
            bad.result()
        except ValueError as exc:
            error = str(exc)
        print(json.dumps({{"ok": ok.result(), "error": error, "alive": alive.status().value,
                          "cancelled": alive.cancel().value, "killed": killed.status().value}}))
        """,
    )
    assert seen == {
        "ok": 5,
        "error": "no luck",
        "alive": "RUNNING",
        "cancelled": "CANCELLED",
        "killed": "FAILED",
    }
    code, report = _doctor(kinetic_home)
    assert code == 0, report


def test_an_orphaned_process_is_found_and_stopped(jobs, kinetic_home: Path):
    job_id = _running(jobs.hold, 60)
    (host,) = _hosts(job_id)
    with Store(kinetic_home / "state.db") as store:  # a settled row whose process survived
        store.write("UPDATE jobs SET status = 'CANCELLED', finished_at = 1 WHERE job_id = ?", (job_id,))
    report = examine(kinetic_home)
    assert not report.clean
    assert f"of settled jobs or closed lanes ({job_id})" in _problems(report.to_dict())["processes"]
    assert host.is_alive()
    report = examine(kinetic_home, repair=True)
    assert any(f"stopped orphaned process group {host.pgid} of {job_id}" in a for a in report.actions), report
    assert not host.is_alive()
    assert "processes" not in _problems(report.to_dict())


def test_due_work_without_a_supervisor_is_a_problem_repair_starts_it(jobs, kinetic_home: Path):
    held = [_running(jobs.hold, 60) for _ in range(os.cpu_count() or 1)]
    queued = kinetic.run()(jobs.add).run_async(1, 1).job_id
    assert kinetic.attach(queued).status().value == "PENDING"
    supervisor.stop(kinetic_home)
    report = examine(kinetic_home)
    assert "not running while work is due (job queue)" in _problems(report.to_dict())["supervisor"]
    report = examine(kinetic_home, repair=True)
    assert any("started the workspace supervisor (job queue due)" in a for a in report.actions), report.actions
    assert report.clean, report
    assert supervisor.running(kinetic_home) is not None
    for job_id in held:
        kinetic.attach(job_id).cancel()
    wait_for(lambda: kinetic.attach(queued).status().finished, 30, "the queued job run by the supervisor")
    assert kinetic.attach(queued).result() == 2


def test_a_job_directory_without_a_row_or_handle_stays_a_problem(kinetic_home: Path, monkeypatch):
    stray = kinetic_home / "local" / "jobs" / "job-0123abcd"
    stray.mkdir(parents=True)
    old = time.time() - 3600
    os.utime(stray, (old, old))
    report = examine(kinetic_home, repair=True)
    assert "neither a row nor a handle.json (job-0123abcd)" in _problems(report.to_dict())["job rows"]
    assert stray.exists()
    code, _ = _doctor(kinetic_home)
    assert code == 1


def test_a_home_open_to_others_is_reported_then_tightened(kinetic_home: Path):
    examine(kinetic_home, repair=True)  # a clean store to start from
    kinetic_home.chmod(0o755)
    (kinetic_home / "state.db").chmod(0o644)
    report = examine(kinetic_home)
    problem = _problems(report.to_dict())["permissions"]
    assert f"{kinetic_home} is 0755, not 0700; 1 path under it too (e.g. state.db)" in problem
    assert kinetic_home.stat().st_mode & 0o777 == 0o755  # looking did not tighten it
    report = examine(kinetic_home, repair=True)
    assert report.clean, report
    assert kinetic_home.stat().st_mode & 0o777 == 0o700
    assert (kinetic_home / "state.db").stat().st_mode & 0o777 == 0o600


def test_a_stopped_fork_server_is_a_problem(jobs, kinetic_home: Path):
    assert kinetic.run()(jobs.add).run_async(1, 2).result(timeout=30) == 3
    pid = launcher.server_status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        report = examine(kinetic_home)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "does not answer (stopped?)" in _problems(report.to_dict())["fork server"]
    assert examine(kinetic_home).clean


CLAIM_THEN_DIE = """
    import os
    import kinetic_tui as kinetic
    from kinetic_tui.core.backends.local import launching
    from {package} import jobs

    launching.launch_job = lambda store, row: os._exit(0)  # the client dies between its claim and its spawn
    kinetic.run()(jobs.add).run_async(20, 22)
"""

SPAWNER_DIES = """
    import sys
    from kinetic_tui.core.backends.local import launch_files

    launch_files.take_spawn(sys.argv[1], sys.argv[2], "spawner")  # takes the launch, dies before forking
"""


def _claimed_by_a_dead_client(user_project, kinetic_home: Path) -> str:
    project, package = user_project
    client = start_client(project, CLAIM_THEN_DIE.format(package=package))
    client.communicate(timeout=30)
    supervisor.stop(kinetic_home)  # no reader settles it meanwhile: the records are all that is left
    (row,) = local_backend().jobs()
    assert (row.status.value, row.hosts) == ("RUNNING", None)
    return row.job_id


def test_a_claim_without_a_live_launcher_is_found_then_queued_again(jobs, user_project, kinetic_home: Path):
    job_id = _claimed_by_a_dead_client(user_project, kinetic_home)
    before = _tree(kinetic_home / "local" / "jobs" / job_id)
    report = examine(kinetic_home)
    problem = _problems(report.to_dict())["launches"]
    assert f"{job_id}: claim " in problem and "without a live launcher" in problem and "no spawner took it" in problem
    assert _tree(kinetic_home / "local" / "jobs" / job_id) == before  # looking abandoned nothing
    report = examine(kinetic_home, repair=True)
    assert any(f"settled the stuck launch of {job_id}" in a and "now PENDING" in a for a in report.actions), report
    assert "launches" not in _problems(report.to_dict())
    wait_for(lambda: kinetic.attach(job_id).status().finished, 30, "the requeued job run by the supervisor")
    assert kinetic.attach(job_id).result() == 42  # it ran, once, after the repair


def test_a_spawn_token_without_a_started_record_is_found_then_queued_again(jobs, user_project, kinetic_home: Path):
    job_id = _claimed_by_a_dead_client(user_project, kinetic_home)
    job_dir = kinetic_home / "local" / "jobs" / job_id
    token = launcher.claim_token(job_dir)
    spawner = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SPAWNER_DIES), str(job_dir), str(token)], timeout=30, check=True
    )
    assert spawner.returncode == 0 and (job_dir / f"spawn-{token}.json").exists()
    problem = _problems(examine(kinetic_home).to_dict())["launches"]
    assert f"{job_id}: spawn token {token} was taken by pid" in problem
    assert "died without a started record for host 0" in problem
    report = examine(kinetic_home, repair=True)
    assert any(f"settled the stuck launch of {job_id}" in a for a in report.actions), report.actions
    assert "launches" not in _problems(report.to_dict())
    wait_for(lambda: kinetic.attach(job_id).status().finished, 30, "the requeued job run by the supervisor")
    assert kinetic.attach(job_id).result() == 42


def test_a_submission_killed_before_its_row_is_not_a_problem_and_repair_removes_it(kinetic_home: Path):
    """A client killed between writing a job's files and queuing its row: never acknowledged, never run."""
    client = textwrap.dedent(
        """
        import os, signal
        import kinetic_tui as kinetic
        from kinetic_tui.core.backends.local.backend import LocalBackend

        LocalBackend._queue = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)

        def double(x):
            return 2 * x

        kinetic.run()(double).run_async(21)
        """
    )
    run = subprocess.run([sys.executable, "-c", client], env={**os.environ, "KINETIC_HOME": str(kinetic_home)})
    assert run.returncode == -signal.SIGKILL
    (handle,) = kinetic_home.glob("local/buckets/*/job-*/handle.json")
    job_id = handle.parent.name
    old = time.time() - 3600  # older than a submission in progress
    for path in (handle, kinetic_home / "local" / "jobs" / job_id):
        os.utime(path, (old, old))
    code, report = _doctor(kinetic_home)
    assert code == 0, report
    rows = next(c["message"] for c in report["checks"] if c["check"] == "job rows")
    assert f"1 submissions were interrupted before they were queued ({job_id}: never acknowledged" in rows
    code, report = _doctor(kinetic_home, "--repair")
    assert code == 0 and any(f"removed the files of {job_id}" in a for a in report["actions"]), report
    assert not handle.parent.exists() and not (kinetic_home / "local" / "jobs" / job_id).exists()
    after = _doctor(kinetic_home)[1]["checks"]
    assert "interrupted" not in next(c["message"] for c in after if c["check"] == "job rows")
