"""The chaos test's judge on hand-made evidence: each rule it enforces flags the case it is there for, and
evidence that breaks no rule passes (so a clean chaos run means something)."""

from __future__ import annotations

from typing import Any

from tests.chaos.reconcile import Known, Verdict, World, judge


def row(status: str, phase: str | None = None, detail: str | None = None) -> dict[str, Any]:
    return {"status": status, "phase": phase, "detail": detail, "finished_at": 10.0}


def marker(job: str, kind: str, pid: int = 100, t: float = 1.0, tag: str = "a0-0") -> dict[str, Any]:
    return {"job": job, "kind": kind, "pid": pid, "pgid": pid, "t": t, "tag": tag}


def ran(job: str, pid: int = 100, tag: str = "a0-0") -> list[dict[str, Any]]:
    return [marker(job, "start", pid, tag=tag), marker(job, "end", pid, t=2.0, tag=tag)]


def categories(verdict: Verdict) -> list[str]:
    return sorted(category for category, _ in verdict.violations)


def test_clean_evidence_passes() -> None:
    world = World(jobs={"job-1": row("SUCCEEDED"), "job-2": row("FAILED", "execute")})
    markers = [*ran("job-1"), marker("job-2", "start", tag="a0-1"), marker("job-2", "raised", tag="a0-1")]
    acks = [{"op": "async", "job": "job-1", "client": "c"}, {"op": "async", "job": "job-2", "client": "c"}]
    assert judge(world, markers, acks, []).violations == []


def test_a_returned_job_recorded_failed_is_flagged_unless_its_process_was_killed() -> None:
    world = World(jobs={"job-1": row("FAILED", "lost", "host 0 vanished without an exit status or result")})
    verdict = judge(world, ran("job-1"), [], [])
    assert categories(verdict) == ["succeeded-recorded-failed"]
    assert verdict.known() is None  # the lost-exit defect is fixed: this violation fails the chaos run
    kill = {"kind": "job", "signal": "KILL", "pid": 100, "t": 1.5, "jobs": ["job-1"]}
    assert judge(world, ran("job-1"), [], [kill]).violations == []


def test_lost_duplicated_and_stuck_are_flagged() -> None:
    world = World(jobs={"job-1": row("SUCCEEDED"), "job-3": row("PENDING")})
    markers = [*ran("job-1"), *ran("job-1", pid=101), *ran("job-2", tag="a0-2")]
    acks = [{"op": "async", "job": "job-4", "client": "c"}]
    verdict = judge(world, markers, acks, [])
    assert categories(verdict) == ["duplicated", "lost", "lost", "stuck"]
    assert verdict.known() is None  # none of these is a reported defect: the chaos test fails on them


def test_an_input_run_under_two_ids_passes_only_as_recorded_attempts() -> None:
    world = World(jobs={"job-1": row("FAILED", "lost"), "job-2": row("SUCCEEDED")})
    markers = [marker("job-1", "start", pid=100, tag="m0-3"), *ran("job-2", pid=101, tag="m0-3")]
    kill = {"kind": "lane", "signal": "KILL", "pid": 100, "t": 1.5, "jobs": ["job-1"]}
    assert categories(judge(world, markers, [], [kill])) == ["duplicated"]
    world.attempts = {"group-1": [["job-1", "job-2"]]}
    verdict = judge(world, markers, [], [kill])
    assert verdict.violations == [] and verdict.retries == 1


def test_a_run_whose_violations_are_all_reported_defects_names_them() -> None:
    reported = Known("stale row", "a reason", ("stuck",), "claimed but its processes never started")
    other = Known("other", "another reason", ("lost",), "never matches")
    world = World(jobs={"job-1": row("RUNNING")}, unlaunched={"job-1"})
    verdict = judge(world, [], [], [])
    assert verdict.known((other, reported)) == [reported]
    assert verdict.known((other,)) is None and verdict.known() is None
    verdict.add("lost", "job-2 was acknowledged to a client but no job row lists it")
    assert verdict.known((other, reported)) is None  # one violation that is no reported defect fails the run
