"""`kinetic-tui down` on a local profile: what finished keeps its result, only what still runs is cancelled,
and nothing queued starts on the way down."""

from __future__ import annotations

from click.testing import CliRunner

import kinetic_tui as kinetic
from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project, wait_for

TIMEOUT = 30.0


def _cpu_nodes(nodes: int) -> None:
    backend = local_backend()
    backend.remove_pool("cpu")
    backend.add_pool("cpu", "cpu", nodes)


def _down() -> str:
    result = CliRunner().invoke(main, ["down", "--yes"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_down_settles_a_job_that_finished_unobserved_and_cancels_the_one_still_running(jobs):
    _cpu_nodes(2)
    backend = local_backend()
    done = kinetic.run()(jobs.hold).run_async(0.1)
    running = kinetic.run()(jobs.hold).run_async(60.0)
    job_dir = backend.job(done.job_id).job_dir
    wait_for(lambda: launcher.exit_code(job_dir, 0) is not None, TIMEOUT, "the short job to exit")
    wait_for(lambda: backend.job(running.job_id).hosts, TIMEOUT, "the long job's processes")
    assert backend.job(done.job_id).status is JobStatus.RUNNING  # nobody has looked since it ended
    assert "(1 jobs cancelled, 1 finished jobs settled)" in _down()
    assert backend.job(done.job_id).status is JobStatus.SUCCEEDED
    assert done.result(timeout=TIMEOUT)["job"] == done.job_id
    assert backend.job(running.job_id).status is JobStatus.CANCELLED


def test_down_cancels_the_queue_without_starting_any_of_it(jobs):
    _cpu_nodes(1)
    backend = local_backend()
    running = kinetic.run()(jobs.hold).run_async(60.0)
    queued = [kinetic.run()(jobs.hold).run_async(60.0) for _ in range(2)]
    wait_for(lambda: backend.job(running.job_id).hosts, TIMEOUT, "the running job's processes")
    assert "(3 jobs cancelled, 0 finished jobs settled)" in _down()
    for handle in [running, *queued]:
        assert backend.job(handle.job_id).status is JobStatus.CANCELLED
    assert [backend.job(h.job_id).started_at for h in queued] == [None, None]
