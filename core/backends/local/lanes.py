"""Map lanes on the local backend: one runner process per node works through a chunk of a batch's inputs.

Why: every input of a `map` is a durable job (its own row, log range and result), but a process per input
costs a fork and a dozen files per input, so 500 trivial inputs took 100x what `ProcessPoolExecutor` takes.
A lane pays the fork, the download and the archive extraction once per chunk, as an executor's workers do.
The trade, stated in the README: the inputs of one lane share its process (module globals persist from
one input to the next; cwd, sys.path and os.environ are restored after each), while different lanes,
batches and jobs never share one.

Chunks follow guided self-scheduling: a lane takes `1 / (CHUNK_DIVISOR x P)` of the batch's unassigned
inputs (P: the nodes the batch may use), so chunks shrink toward the end and a slow input delays few
others. Each lane costs a fork and an archive extraction (~10 ms), so once the batch's inputs have been
timed a lane takes at least what keeps it busy for LANE_SECONDS, but never more than its fair share: a
`1 / P` of what waits and what the batch's open lanes still hold, so that they all end together. Trivial
inputs run in a few big lanes, and a lane opened while the batch's other lanes finish does not take the
whole rest while their nodes go idle. Before a batch's own inputs are timed, the time its function's
inputs took in its last timed batch stands in (`input_timings`, keyed by MODULE:QUALNAME), so a map
repeated in a loop starts with one fair-share lane per node instead of a second round of lanes.
A lane holds one node of its pool for its lifetime; its inputs show PENDING until it reaches them, then
RUNNING, then their outcome.

Layout of lane L: `local/lanes/L/` with `spec.json` (what to run), `progress.jsonl` (the runner's
start/end/skip lines), `results.bin` (result pickles back to back), `cancelled` (job ids to skip), and the
launcher's `logs/host-0.log`, `exit-0` and `work/host-0/`.

Observing is done by whoever looks (a waiting client, the console, the supervisor): the progress lines
not yet applied are applied in one transaction that also advances `lanes.progress`, so each line counts
once however many processes look. A lane whose process has ended is closed: an input it had started but
not finished failed (phase `lost`) or was cancelled; inputs it never reached go back to the queue, unless
the lane's runner died before starting any input, which fails them all (else a lane that cannot start would
be relaunched forever). A lane whose process never ran the runner (its starter died before letting it, see
launch_files) was never launched: its inputs go back to the queue.
"""

from __future__ import annotations

import json
import math
import secrets
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.launcher import HostProcess
from kinetic_tui.core.paths import kinetic_home
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo, pools_repo

CHUNK_DIVISOR = 2
LANE_SECONDS = 0.1
MAX_CHUNK = 1000
ADOPT_AFTER = 2.0  # seconds a lane may open without its process recorded before a scheduler looks at it
SPEC, PROGRESS, RESULTS, CANCELLED = "spec.json", "progress.jsonl", "results.bin", "cancelled"


@dataclass(frozen=True)
class Lane:
    lane_id: str
    pool: str
    group_id: str
    dir: Path
    hosts: tuple[HostProcess, ...] | None
    started_at: float
    progress: int
    ended_at: float | None

    @classmethod
    def from_values(cls, values: tuple[Any, ...]) -> Lane:
        """A lane from its row, in `lanes_repo.COLUMNS` order."""
        lane_id, pool, group_id, directory, hosts, started, progress, ended = values
        parsed = None if hosts is None else tuple(HostProcess.from_dict(h) for h in json.loads(hosts))
        return cls(lane_id, pool, group_id, Path(directory), parsed, started, progress, ended)

    def has_news(self) -> bool:
        """Progress not applied yet, or the process has ended: one or two stats, no store access."""
        try:
            if (self.dir / PROGRESS).stat().st_size > self.progress:
                return True
        except FileNotFoundError:
            pass
        return self.has_ended()

    def has_ended(self) -> bool:
        """The lane's process has been reaped (its exit file is written): one stat."""
        return launcher.exit_code(self.dir, 0) is not None

    def has_stopped(self) -> bool:
        """Ended, or its leader is gone without an exit file (its reaper died), or no process was recorded
        ADOPT_AFTER seconds after it opened (its launcher died): a stat and, while it runs, a read of its
        leader's /proc entry. What a full reconcile must then settle."""
        if self.has_ended():
            return True
        if self.hosts is None:
            return time.time() - self.started_at > ADOPT_AFTER
        return not self.hosts[0].is_alive()


def is_lane_input(launch: dict[str, Any]) -> bool:
    return "lane_input" in launch


def lane_input(batch_uri: str, batch_sha256: str, context_uri: str, context_sha256: str, index: int) -> dict[str, Any]:
    """What a lane needs of one input, kept in its row's `launch` (a retry copies it)."""
    return {
        "batch": batch_uri,
        "batch_sha256": batch_sha256,
        "context": context_uri,
        "context_sha256": context_sha256,
        "index": index,
    }


def active(store: Store, group_id: str | None = None) -> list[Lane]:
    return [Lane.from_values(v) for v in lanes_repo.open_lanes(store, group_id)]


def get(store: Store, lane_id: str) -> Lane | None:
    values = lanes_repo.get(store, lane_id)
    return Lane.from_values(values) if values else None


@dataclass(frozen=True)
class Assignment:
    """A lane created in the store, with the (job_id, launch) of its inputs in order: launched after commit."""

    lane: Lane
    inputs: list[tuple[str, dict[str, Any]]]


def chunk_size(waiting: int, parallel: int, free: int, mean_seconds: float | None, held: int = 0) -> int:
    """How many of `waiting` inputs the next lane takes when `free` of the batch's `parallel` nodes are
    free and its open lanes still hold `held` (see the module docstring); never so many that a free node
    would be left without inputs."""
    size = math.ceil(waiting / (CHUNK_DIVISOR * max(parallel, 1)))
    if mean_seconds is not None:
        fair_share = math.ceil((waiting + held) / max(parallel, 1))
        size = max(size, min(int(LANE_SECONDS / max(mean_seconds, 1e-6)), fair_share))
    return max(1, min(size, math.ceil(waiting / max(free, 1)), MAX_CHUNK))


def assign(conn: sqlite3.Connection, group_id: str, pool: str, free: int, now: float) -> Assignment:
    """Open a lane on `pool` for the group's next chunk of unassigned inputs (inside the claim transaction)."""
    waiting = lanes_repo.unassigned_count(conn, group_id)
    capacity = pools_repo.capacity(conn, pool)
    limit = jobs_repo.max_concurrent(conn, group_id)
    parallel = min(capacity, limit) if limit else capacity
    mean = lanes_repo.mean_input_seconds(conn, group_id)
    size = chunk_size(waiting, parallel, free, mean, lanes_repo.held_inputs(conn, group_id))
    rows = lanes_repo.unassigned_inputs(conn, group_id, size)
    chunk = list(zip([job_id for job_id, _ in rows], json_lines("\n".join(launch for _, launch in rows).encode())))
    lane_id = f"lane-{secrets.token_hex(6)}"
    directory = kinetic_home() / "local" / "lanes" / lane_id
    directory.mkdir(parents=True)
    launcher.write_claim(directory)
    lanes_repo.insert(conn, lane_id, pool, group_id, str(directory), now)
    lanes_repo.assign_inputs(conn, lane_id, [job_id for job_id, _ in chunk])
    return Assignment(Lane(lane_id, pool, group_id, directory, None, now, 0, None), chunk)


def write_spec(assignment: Assignment) -> list[str]:
    """Create the lane's directory and spec; return the runner's argv."""
    directory = assignment.lane.dir
    first = assignment.inputs[0][1]["lane_input"]
    spec = {
        "batch": first["batch"],
        "batch_sha256": first["batch_sha256"],
        "context": first["context"],
        "context_sha256": first["context_sha256"],
        "workdir": str(launcher.work_dir(directory, 0)),
        "progress": str(directory / PROGRESS),
        "results": str(directory / RESULTS),
        "cancelled": str(directory / CANCELLED),
        "inputs": [
            [launch["lane_input"]["index"], job_id, launch["output_dir"]] for job_id, launch in assignment.inputs
        ],
    }
    (directory / SPEC).write_text(json.dumps(spec))
    return ["--lane", str(directory / SPEC)]


def record_launch(store: Store, lane_id: str, hosts: Iterable[HostProcess]) -> None:
    lanes_repo.record_hosts(store, lane_id, [h.to_dict() for h in hosts])


# -- observing --------------------------------------------------------------------------------------


def _adopted(store: Store, lane: Lane) -> tuple[Lane, bool]:
    """A lane without recorded processes: (the lane with the process its spawner started, False), or (the
    lane, True) once it is known never to start (see `launcher.launch_state`)."""
    state = launcher.launch_state(lane.dir, 1)
    if state.complete:
        record_launch(store, lane.lane_id, state.started)
        return replace(lane, hosts=tuple(state.started)), False
    return lane, state.failed is not None


def _read_progress(lane: Lane) -> tuple[list[dict[str, Any]], int]:
    """Complete lines after the applied offset, and the offset after them."""
    try:
        with open(lane.dir / PROGRESS, "rb") as fh:
            fh.seek(lane.progress)
            data = fh.read()
    except FileNotFoundError:
        return [], lane.progress
    end = data.rfind(b"\n") + 1
    return json_lines(data[:end]), lane.progress + end


def json_lines(data: bytes) -> list[Any]:
    """Newline-separated JSON documents, decoded as one array: a `json.loads` per line costs more in the
    call than in the decoding, and a map's client reads a thousand progress lines per 500 inputs. A JSON
    document on one line holds no raw newline (`json.dumps` escapes them)."""
    data = data.rstrip(b"\n")
    return json.loads(b"[" + data.replace(b"\n", b",") + b"]") if data else []


def _apply(conn: sqlite3.Connection, events: list[dict[str, Any]]) -> list[str]:
    """Apply progress lines in order; an input's `start` right before its `end` is written with it (its
    row, and the status indexes, change once, not twice: a map's client applies hundreds per look)."""
    ended: list[lanes_repo.Ran] = []
    started: dict[str, dict[str, Any]] = {}  # the last `start` line, not written yet
    for event in events:
        job_id = event["job"]
        if "start" in event:
            started[job_id] = event
        elif "skip" in event:
            _write_start(conn, started.pop(job_id, None))
            lanes_repo.input_skipped(conn, job_id)
        else:
            start = started.pop(job_id, None)
            ok = event["success"]
            ended.append(
                lanes_repo.Ran(
                    job_id,
                    "SUCCEEDED" if ok else "FAILED",
                    None if ok else event["phase"],
                    None if ok else f"{event['error_type']}: {event['error']}",
                    event["end"],
                    event["log"],
                    event["at"],
                    event["size"],
                    None if start is None else start["log"],
                    None if start is None else start["start"],
                )
            )
    for start in started.values():
        _write_start(conn, start)
    return lanes_repo.inputs_ended(conn, ended)


def _write_start(conn: sqlite3.Connection, event: dict[str, Any] | None) -> None:
    if event is not None:
        lanes_repo.input_started(conn, event["job"], event["log"], event["start"])


def _close(conn: sqlite3.Connection, lane: Lane, code: int | None, now: float) -> list[str]:
    """The lane's process has ended and its progress is applied: settle or requeue what it still held."""
    started = lanes_repo.started_count(conn, lane.lane_id)
    unrun = lane.hosts is None or lane.hosts[0].never_ran(lane.dir)
    how = "was never launched" if unrun else f"exited with {code if code is not None else 'no status'}"
    settled = lanes_repo.settle_in_flight(conn, lane.lane_id, f"its lane {lane.lane_id} {how} while the input ran", now)
    if started or unrun:  # the rest never ran: another lane takes them
        lanes_repo.requeue_unstarted(conn, lane.lane_id)
    else:
        settled += lanes_repo.fail_unstarted(
            conn, lane.lane_id, f"its lane {lane.lane_id} {how} before starting any input; see {lane.dir}", now
        )
    lanes_repo.close(conn, lane.lane_id, now)
    lanes_repo.record_input_seconds(conn, lane.group_id, now)
    return settled


def observe(store: Store, lane: Lane, patient: bool = True) -> tuple[list[str], bool]:
    """Apply the lane's new progress; close it if its process has ended. Returns (settled job ids, closed).

    Impatient observers (a client polling every few ms) close a lane only once its exit file is written;
    patient ones (a full reconcile) also close a lane whose process is gone without one (its reaper is
    stopped, busy or dead), which costs a scan of /proc, too much for every poll."""
    code = launcher.exit_code(lane.dir, 0)  # first: once ended, every progress line is in the file
    ended = code is not None
    if lane.hosts is None and (ended or patient):
        lane, unlaunched = _adopted(store, lane)
        ended = ended or unlaunched
    if not ended and patient and lane.hosts is not None:
        ended, code = launcher.host_exit(lane.dir, lane.hosts[0])
    if not ended and not lane.has_news():
        return [], False
    with store.transaction() as conn:
        current = Lane.from_values(lanes_repo.current(conn, lane.lane_id))
        current = current if current.hosts else replace(current, hosts=lane.hosts)
        if current.ended_at is not None:
            return [], False
        events, offset = _read_progress(current)
        settled = _apply(conn, events)
        lanes_repo.set_progress(conn, lane.lane_id, offset)
        if ended:
            settled += _close(conn, current, code, time.time())
    return settled, ended


def request_skip(lane: Lane, job_id: str) -> None:
    """Ask the lane not to start `job_id` (see the runner's lane protocol)."""
    with open(lane.dir / CANCELLED, "a") as fh:
        fh.write(job_id + "\n")


def read_results(lane_dir: Path) -> bytes:
    return (lane_dir / RESULTS).read_bytes()


def read_result(lane_dir: Path, at: int, size: int) -> bytes:
    with open(lane_dir / RESULTS, "rb") as fh:
        fh.seek(at)
        return fh.read(size)
