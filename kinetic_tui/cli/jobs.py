"""`kinetic-tui jobs ...`: list, inspect, cancel and clean up jobs.

`list`, `status`, `logs` and `cancel` are the command language's `jobs`, `status`, `logs` and `cancel` verbs,
generated from the verb table; `result` runs the `result` verb and then, as Kinetic's `jobs result` does,
cleans the job up; `cleanup` and `debug` are the CLI's own. Every one takes Kinetic's `--project/--zone/
--cluster/--namespace` overrides (`kinetic_tui.cli.options`).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import click

from kinetic_tui.cli.options import cleanup_timing, cleanup_timing_params, infra_params, with_params
from kinetic_tui.cli.output import UsageLineError, guard, json_flag, run_line
from kinetic_tui.cli.verbs import VerbCommand, VerbValue
from kinetic_tui.core.commands.verbs import VERBS

_JOB = VerbValue(VERBS["status"].positionals[0])  # completes job ids


@click.group()
def jobs() -> None:
    """Jobs: list, inspect, cancel, clean up."""


class JobsList(VerbCommand):
    """`jobs list`: the `jobs` verb (`--json` prints its records); its text is a table fitted to the
    terminal (`kinetic_tui.cli.job_table`), every column with `--wide`."""

    def __init__(self) -> None:
        wide = click.Option(
            ["--wide"], is_flag=True, help="every column, nothing cut (default: the columns that fit the terminal)"
        )
        super().__init__(VERBS["jobs"], "list", [wide, *infra_params(namespace=True)])

    def _run(self, **parsed: Any) -> None:
        line, as_json = self.typed_line()
        if as_json:
            run_line(line, as_json=True)
            return
        import shutil

        from kinetic_tui.cli.job_table import job_table

        listed, values = guard(lambda: listing(line))
        width = None if parsed["wide"] else shutil.get_terminal_size().columns
        click.echo(job_table(listed, values, time.time(), width))


jobs.add_command(JobsList())


def listing(line: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The `jobs` line's records (the parser judges the words, exit 2 when they do not parse) and the
    values of the newest SUCCEEDED ones."""
    import asyncio

    from kinetic_tui.cli.job_table import VALUE_ROWS
    from kinetic_tui.core.commands import ParseError, parse_script
    from kinetic_tui.core.commands.execute import execute
    from kinetic_tui.core.console import Console

    try:
        ((_, command),) = parse_script(line)
    except ParseError as exc:
        raise UsageLineError(exc.message) from None

    async def read() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        console = Console(default_wait=True, offload=False)
        try:
            records = await execute(console, command)
            done = [job["job_id"] for job in records if job["status"] == "SUCCEEDED"][:VALUE_ROWS]
            return records, await console.jobs.values(done)
        finally:
            await console.aclose()

    return asyncio.run(read())


for _verb in ("status", "logs"):
    jobs.add_command(VerbCommand(VERBS[_verb], extra=infra_params(namespace=True)))


def _await_stopped(parsed: dict[str, Any]) -> None:
    """After the `cancel` verb: wait, as Kinetic does, until the job's processes or workload are gone."""
    from kinetic_tui.core.jobs import attach

    job = parsed.get("job")
    if job:
        guard(lambda: attach(job).wait_removed(files=False, **cleanup_timing()))


jobs.add_command(
    VerbCommand(VERBS["cancel"], extra=[*cleanup_timing_params(), *infra_params(namespace=True)], after=_await_stopped)
)


def _cleanup(job: str, k8s: bool, gcs: bool) -> None:
    from kinetic_tui.core.jobs import attach
    from kinetic_tui.core.validation import require_job_id

    guard(lambda: require_job_id(job), UsageLineError)
    timing = cleanup_timing()
    guard(
        lambda: attach(job).cleanup(
            k8s=k8s, gcs=gcs, cleanup_timeout=timing["timeout"], cleanup_poll_interval=timing["poll_interval"]
        )
    )


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
