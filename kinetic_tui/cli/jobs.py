"""`kinetic-tui jobs ...`: list, inspect, cancel and clean up jobs.

`list`, `status`, `logs` and `cancel` are the command language's `jobs`, `status`, `logs` and `cancel` verbs,
generated from the verb table; `result` runs the `result` verb and then, as Kinetic's `jobs result` does,
cleans the job up; `cleanup` and `debug` are the CLI's own. Every one takes Kinetic's `--project/--zone/
--cluster/--namespace` overrides (`kinetic_tui.cli.options`).
"""

from __future__ import annotations

import json
import shlex
import time

import click

from kinetic_tui.cli.options import cleanup_timing_params, infra_params, with_params
from kinetic_tui.cli.output import UsageLineError, guard, json_flag, run_line
from kinetic_tui.cli.verbs import VerbCommand, VerbValue
from kinetic_tui.core.commands.verbs import VERBS

_JOB = VerbValue(VERBS["status"].positionals[0])  # completes job ids


@click.group()
def jobs() -> None:
    """Jobs: list, inspect, cancel, clean up."""


jobs.add_command(VerbCommand(VERBS["jobs"], "list", infra_params(namespace=True)))
for _verb in ("status", "logs"):
    jobs.add_command(VerbCommand(VERBS[_verb], extra=infra_params(namespace=True)))
jobs.add_command(VerbCommand(VERBS["cancel"], extra=[*cleanup_timing_params(), *infra_params(namespace=True)]))


def _cleanup(job: str, k8s: bool, gcs: bool) -> None:
    from kinetic_tui.core.jobs import attach
    from kinetic_tui.core.validation import require_job_id

    guard(lambda: require_job_id(job), UsageLineError)
    guard(lambda: attach(job).cleanup(k8s=k8s, gcs=gcs))


@jobs.command("result")
@click.argument("job", type=_JOB)
@click.option(
    "--timeout",
    type=VerbValue(VERBS["result"].flag_table["--timeout"]),
    help="first wait this long for the job to end (default: answer at once)",
)
@click.option(
    "--cleanup/--no-cleanup",
    default=True,
    show_default=True,
    help="after printing the result, remove the job's workload and uploaded inputs (its result and logs stay)",
)
@with_params([*cleanup_timing_params(), *infra_params(namespace=True)])
@json_flag
def jobs_result(job: str, timeout: str | None, cleanup: bool, as_json: bool) -> None:
    """Show a job's result or remote traceback; then clean it up unless --no-cleanup."""
    run_line(shlex.join(["result", job, *(["--timeout", timeout] if timeout is not None else [])]), as_json)
    if cleanup:
        _cleanup(job, k8s=True, gcs=True)


@jobs.command("cleanup")
@click.argument("job", type=_JOB)
@click.option(
    "--k8s/--no-k8s",
    default=True,
    show_default=True,
    help="remove the job's workload (local: its working directories; gke: its Kubernetes resources)",
)
@click.option(
    "--gcs/--no-gcs",
    default=True,
    show_default=True,
    help="remove the job's uploaded inputs (payload and code) from the jobs bucket",
)
@with_params([*cleanup_timing_params(), *infra_params(namespace=True)])
def jobs_cleanup(job: str, k8s: bool, gcs: bool) -> None:
    """Remove a finished job's workload and uploaded inputs (its result, output and logs stay)."""
    _cleanup(job, k8s, gcs)
    removed = [part for part, chosen in (("workload", k8s), ("uploaded inputs", gcs)) if chosen]
    click.echo(f"cleaned up {job}" + (f": {' and '.join(removed)}" if removed else ": nothing chosen"))


@jobs.command("prune")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="DURATION",
    help="remove the jobs that finished longer ago than this: 30d, 12h, 90m, 3600s (plain: seconds)",
)
@json_flag
def jobs_prune(older_than: str, as_json: bool) -> None:
    """Remove old finished jobs: their rows, logs, results and files. Active jobs stay, and so do the jobs
    of pipeline runs still running; artifacts are never a job's, so none is removed."""
    from kinetic_tui.core.backends.registry import workspace_backend
    from kinetic_tui.core.validation import parse_duration

    seconds = guard(lambda: parse_duration("--older-than", older_than), UsageLineError)
    removed, kept = guard(lambda: workspace_backend().prune(time.time() - seconds))
    if as_json:
        click.echo(json.dumps({"removed": removed, "kept": kept}))
        return
    click.echo(
        f"pruned {removed} jobs that finished more than {older_than} ago"
        + (f"; kept {kept} a running pipeline still reads" if kept else "")
    )


@jobs.command("debug")
@click.argument("job", type=VerbValue(VERBS["status"].positionals[0]))
@click.option("--port", type=click.IntRange(0, 65535), default=5678, show_default=True, help="local port (GKE)")
@click.option("--timeout", type=click.FloatRange(0, 31_536_000), default=600, show_default=True, help="seconds to wait")
def jobs_debug(job: str, port: int, timeout: float) -> None:
    """Print where to attach a debugger to a job submitted with debug=True. A local job is reached at its
    own address; a GKE job through a port-forward to PORT that stays up until the job ends or Ctrl+C."""
    from kinetic_tui.core.jobs import attach
    from kinetic_tui.core.validation import require_job_id

    guard(lambda: require_job_id(job), UsageLineError)
    handle = guard(lambda: attach(job))
    session = guard(lambda: handle.debug_attach(local_port=port, timeout=timeout))
    click.echo(f"attach to {session.address}")
    if not session.forwarded:
        return
    try:
        while not guard(handle.status).finished:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
