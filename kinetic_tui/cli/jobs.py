"""`kinetic-tui jobs ...`: list, inspect, cancel and clean up jobs.

`list`, `status`, `logs`, `result` and `cancel` are the command language's `jobs`, `status`, `logs`,
`result` and `cancel` verbs, generated from the verb table; `cleanup` is the CLI's own.
"""

from __future__ import annotations

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
