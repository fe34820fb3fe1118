"""The suite's guard against leaked daemons: a test that leaves a process of ours serving its home fails,
and the process is killed, so one leaky test cannot slow or confuse the rest of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import processes

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]


def _sleeper(home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KINETIC_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)


def test_a_process_carrying_the_home_is_found_and_reaped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sleeper = _sleeper(home)
    try:
        deadline = time.monotonic() + 5
        while sleeper.pid not in processes.serving(home):
            assert time.monotonic() < deadline, "the sleeper was never found"
            time.sleep(0.02)
        assert sleeper.pid not in processes.serving(tmp_path / "other")
        left = processes.reap(home, grace=0.1)
        assert list(left) == [sleeper.pid] and "time.sleep(60)" in left[sleeper.pid]
        assert sleeper.wait(timeout=5) == -9
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_suite_fixture_fails_a_test_that_leaves_a_process(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(
        test_leaky=textwrap.dedent(
            """
            import os, subprocess, sys

            def test_leaves_one(kinetic_home):
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 env=dict(os.environ), start_new_session=True)

            def test_leaves_none(kinetic_home):
                subprocess.run([sys.executable, "-c", "pass"], env=dict(os.environ), check=True)
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "pythonpath=" + str(ROOT))
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the test left processes of ours running (killed now)*time.sleep(60)*"])


def test_a_test_that_undoes_the_suites_home_fails_and_the_outer_homes_processes_are_left_alone(
    pytester: pytest.Pytester,
) -> None:
    """`monkeypatch.undo()` in a test also undoes the suite's KINETIC_HOME, back to a session fixture's home
    (the served workspace): the teardown must not stop what serves that home for the tests still to come."""
    pytester.makeconftest(
        (ROOT / "tests" / "conftest.py").read_text()
        + textwrap.dedent(
            """

            import subprocess
            import sys


            @pytest.fixture(scope="session")
            def outer(tmp_path_factory):
                home = tmp_path_factory.mktemp("outer-home")
                patch = pytest.MonkeyPatch()
                patch.setenv("KINETIC_HOME", str(home))
                env = {**os.environ, "KINETIC_HOME": str(home)}
                sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                                           start_new_session=True)
                yield sleeper
                sleeper.kill()
                sleeper.wait()
                patch.undo()
            """
        )
    )
    pytester.makepyfile(
        test_undoing=textwrap.dedent(
            """
            def test_undoes(outer, monkeypatch):
                monkeypatch.setattr("os.sep", "/")
                monkeypatch.undo()

            def test_the_outer_home_still_serves(outer):
                assert outer.poll() is None, "the outer home's process was stopped by a test's teardown"
            """
        )
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "pythonpath=" + str(ROOT))
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*the test undid the suite's KINETIC_HOME (monkeypatch.undo())*"])
