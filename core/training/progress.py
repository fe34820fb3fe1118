"""Fold one attempt's structured log lines and its end into the stored TrainingJob's status and epochs.

Folding is idempotent: every event sets absolute values, so re-reading an attempt's whole log on each
refresh (from any process) converges on the same record. Settling happens once, guarded by the caller's
transaction (only an InProgress run whose current attempt ended is settled).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kinetic_tui.core.backends.base import JobInfo
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.training import Checkpoint, TrainingJob, TrainingStatus
from kinetic_tui.core.training.entry import PREEMPTED_EXIT_CODE, parse_event
from kinetic_tui.core.training.records import Run

TERMINAL_EVENTS = ("completed", "failed")
# the phases in which a job is lost by our infrastructure (it could not be started, or it vanished without
# an exit status or result), never by the user's code
INFRASTRUCTURE_PHASES = ("launch", "lost")


def events_in(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [event for event in map(parse_event, lines) if event is not None]


def fold(run: Run, events: list[dict[str, Any]], load_checkpoint: Callable[[int], Checkpoint]) -> None:
    """Apply epoch and checkpoint events; a checkpoint's state comes from durable storage, not the log."""
    job = run.job
    for event in events:
        epoch = event.get("epoch")
        if not isinstance(epoch, int):  # every epoch and checkpoint event carries its epoch; no other is folded
            continue
        if event["type"] == "epoch":
            job.current_epoch = epoch
            run.meta.last_metric = event.get("metric")
        elif event["type"] == "checkpoint" and (job.checkpoint is None or epoch > job.checkpoint.epoch):
            job.checkpoint = load_checkpoint(epoch)


def settle(run: Run, row: JobInfo, events: list[dict[str, Any]], exit_code: int | None) -> None:
    """Decide how the attempt ended: its own last word first, then how its process ended.

    An attempt killed by the interrupt action (a cancelled job), by a signal from outside (what a spot
    reclaim does to a node's processes) or that stopped itself is a preemption: Stopped at the checkpoint
    epoch, one more interruption, the instance kept, resumable. So is an attempt our infrastructure lost
    (phase launch or lost), with the reason kept in `error`. Anything else unreported is a failure: the
    user's own exception reports itself and fails the training.
    """
    job = run.job
    terminal = next((e for e in reversed(events) if e["type"] in TERMINAL_EVENTS), None)
    if terminal is not None and terminal["type"] == "completed":
        job.current_epoch = terminal["epoch"]
        job.metric = terminal["metric"]
        job.artifact_hash = terminal["artifact_hash"]
        run.meta.model_artifact = terminal.get("model_artifact")
        job.status = TrainingStatus.COMPLETED
    elif terminal is not None:
        job.status, job.error = TrainingStatus.FAILED, terminal["error"]
    elif row.status is JobStatus.CANCELLED or exit_code == PREEMPTED_EXIT_CODE or (exit_code or 0) < 0:
        _stop(job)
    elif row.status is JobStatus.FAILED and row.phase in INFRASTRUCTURE_PHASES:
        _stop(job)
        job.error = (
            f"attempt {row.job_id} was lost in phase {row.phase} ({row.detail or 'no detail'}); "
            f"resume continues from epoch {job.current_epoch + 1}"
        )
    else:
        job.status = TrainingStatus.FAILED
        job.error = (
            f"attempt {row.job_id} ended {row.status.value} in phase {row.phase or '-'} without "
            f"reporting completion: {row.detail or 'no detail'}"
        )


def _stop(job: TrainingJob) -> None:
    """Stopped at the checkpoint epoch (0 without one), one more interruption: resumable."""
    job.status = TrainingStatus.STOPPED
    job.current_epoch = job.checkpoint.epoch if job.checkpoint else 0
    job.interruptions += 1
