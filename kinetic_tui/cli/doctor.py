"""`kinetic-tui doctor [--repair] [--json]`: one line per check of the home, one per repair made; exit 0 when
nothing is left to fix, 1 when a problem remains."""

from __future__ import annotations

import json

import click

from kinetic_tui.cli.output import FAILED, OK, json_flag


@click.command()
@click.option("--repair", is_flag=True, help="fix what can be fixed, then check again")
@json_flag
@click.pass_context
def doctor(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Check the workspace: permissions, the store, the supervisor, the fork server, orphaned processes and
    jobs on disk without a row; --repair rebuilds missing job rows, stops orphans and starts the supervisor."""
    from kinetic_tui.core.doctor.checks import examine
    from kinetic_tui.core.paths import home_path

    report = examine(home_path(), repair=repair)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for action in report.actions:
            click.echo(f"repaired {action}")
        for finding in report.findings:
            click.echo(finding.line())
    ctx.exit(OK if report.clean else FAILED)
