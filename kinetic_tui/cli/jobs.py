"""`kinetic-tui jobs ...`: list, inspect, cancel and clean up jobs.

`list`, `status`, `logs`, `result` and `cancel` are the command language's `jobs`, `status`, `logs`,
`result` and `cancel` verbs, generated from the verb table; `cleanup` and `debug` are the CLI's own.
"""

from __future__ import annotations

import time

import click

from kinetic_tui.cli.output import UsageLineError, guard
from kinetic_tui.cli.verbs import VerbCommand, VerbValue
from kinetic_tui.core.commands.verbs import VERBS


@click.group()
def jobs() -> None:
    """Jobs: list, inspect, cancel, clean up."""


jobs.add_command(VerbCommand(VERBS["jobs"], "list"))
for _verb in ("status", "logs", "result", "cancel"):
    jobs.add_command(VerbCommand(VERBS[_verb]))


@jobs.command("cleanup")
@click.argument("job", type=VerbValue(VERBS["status"].positionals[0]))  # completes job ids
def jobs_cleanup(job: str) -> None:
    """Remove a finished job's inputs and working directories (its result, output and logs stay)."""
    from kinetic_tui.core.jobs import attach
    from kinetic_tui.core.validation import require_job_id

    guard(lambda: require_job_id(job), UsageLineError)
    guard(lambda: attach(job).cleanup())
    click.echo(f"cleaned up {job}")


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
