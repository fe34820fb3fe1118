"""A console works on the home it is given: its jobs, pools and supervisor live there, the process
environment is never changed, and two consoles on two homes in one process keep their state apart."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pytest

from kinetic_tui.core import paths
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.console import Console
from kinetic_tui.core.paths import using_home
from tests.helpers import projects

HOMES_MODULE = """
import os
import threading
import time


def where(pause=0.0):
    time.sleep(pause)
    return os.environ["KINETIC_HOME"]


def predict(state, record):
    return record
"""
TIMEOUT = 30.0


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """Two homes besides the test's own KINETIC_HOME; each one's fork server is stopped afterwards."""
    projects.user_project(tmp_path, monkeypatch, "homes_user", HOMES_MODULE)
    first, second = tmp_path / "home-a", tmp_path / "home-b"
    yield first, second
    for home in (first, second):
        with using_home(home):
            launcher.shutdown_server()


def test_a_console_leaves_the_environment_alone_and_its_job_lands_in_its_home(
    homes: tuple[Path, Path], kinetic_home: Path
) -> None:
    other, _ = homes
    environment = dict(os.environ)

    async def scenario() -> str:
        console = Console(home=other)
        assert dict(os.environ) == environment
        job = await console.jobs.submit("homes_user:where", wait=True)
        assert (job.status, job.result) == ("SUCCEEDED", str(other))  # the job process was given this home
        assert (other / "local" / "jobs" / job.job_id).is_dir()
        return job.job_id

    job_id = asyncio.run(scenario())
    assert dict(os.environ) == environment
    assert paths.kinetic_home() == kinetic_home  # this process still resolves its own home
    assert not (kinetic_home / "local" / "jobs" / job_id).exists()

    async def own_home() -> None:
        assert await Console().jobs.list() == ()

    asyncio.run(own_home())


def test_a_predict_registered_through_a_console_of_another_home_is_kept_in_that_home(
    homes: tuple[Path, Path], kinetic_home: Path
) -> None:
    other, _ = homes

    async def scenario() -> None:
        console = Console(home=other)
        try:
            await console.training.start("base", {"learning_rate": 0.5}, epochs=1, wait=True)
            await console.registry.register_from_training("g", "base", predict="homes_user:predict")
            # the product's own modules travel by name: nothing of this checkout is archived for them
            await console.registry.register_from_training("g", "base", predict="kinetic_tui.core.demo.workload:score")
        finally:
            await console.aclose()

    asyncio.run(scenario())
    kept = list(other.glob("local/buckets/*/_artifacts/sha256/*"))
    assert len(kept) == 2  # the trained state and the user's project archive, in the console's home
    assert not (kinetic_home / "local").exists()  # the process's own home was never written


def test_two_consoles_on_two_homes_in_one_process_do_not_mix_their_state(homes: tuple[Path, Path]) -> None:
    async def scenario() -> None:
        first, second = Console(home=homes[0]), Console(home=homes[1])
        await asyncio.gather(first.pools.add("only-a", "l4", 1), second.pools.add("only-b", "v5e-4", 1))
        # concurrent submissions: each console's calls run in worker threads at the same time
        jobs = await asyncio.gather(
            *[
                console.jobs.submit("homes_user:where", args=[0.2], wait=True)
                for console in (first, second, first, second)
            ]
        )
        assert [job.result for job in jobs] == [str(homes[0]), str(homes[1])] * 2
        for console, mine, theirs in ((first, jobs[0::2], jobs[1::2]), (second, jobs[1::2], jobs[0::2])):
            listed = {job.job_id for job in await console.jobs.list()}
            assert listed == {job.job_id for job in mine} and not listed & {job.job_id for job in theirs}
        assert [pool.name for pool in await first.pools.list()] == ["cpu", "only-a"]
        assert [pool.name for pool in await second.pools.list()] == ["cpu", "only-b"]

    asyncio.run(scenario())
    for home in homes:
        assert (home / "state.db").is_file()


def test_the_supervisor_keeps_the_consoles_home(homes: tuple[Path, Path]) -> None:
    """A job queued behind a full pool starts with nobody looking: the supervisor the submission started
    reconciles the console's home, not the one in this process's environment."""
    other, _ = homes

    async def scenario() -> tuple[Console, str]:
        console = Console(home=other, default_wait=False)
        await console.pools.add("solo", "l4", 1)
        await console.jobs.submit("homes_user:where", "l4", args=[0.5])
        queued = await console.jobs.submit("homes_user:where", "l4")
        assert queued.status == "PENDING"
        return console, queued.job_id

    console, queued = asyncio.run(scenario())
    store = console.workspace.store
    deadline = time.monotonic() + TIMEOUT
    while store.query("SELECT status FROM jobs WHERE job_id = ?", (queued,))[0][0] == "PENDING":  # reads only
        assert time.monotonic() < deadline, "the queued job never started"
        time.sleep(0.1)


def test_using_home_is_scoped_to_its_block_and_what_it_starts(tmp_path: Path, kinetic_home: Path) -> None:
    seen: list[Path] = []
    with using_home(tmp_path / "outer"):
        with using_home(tmp_path / "inner"):
            assert paths.kinetic_home() == tmp_path / "inner"
            assert asyncio.run(asyncio.to_thread(paths.kinetic_home)) == tmp_path / "inner"
        assert paths.kinetic_home() == tmp_path / "outer"
        thread = threading.Thread(target=lambda: seen.append(paths.kinetic_home()))
        thread.start()
        thread.join()
    assert seen == [kinetic_home]  # a plain thread starts without the scope: it gets the environment's home
    assert paths.kinetic_home() == kinetic_home


def test_code_pickled_by_value_resolves_the_home_from_its_environment(tmp_path: Path, kinetic_home: Path) -> None:
    """A project that contains this package ships `paths` by value: the scope must pickle (as unset)."""
    cloudpickle.register_pickle_by_value(paths)
    try:
        with using_home(tmp_path / "scoped"):
            shipped = cloudpickle.loads(cloudpickle.dumps(paths.kinetic_home))
            assert shipped() == kinetic_home
    finally:
        cloudpickle.unregister_pickle_by_value(paths)
