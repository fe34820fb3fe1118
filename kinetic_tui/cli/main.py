"""`kinetic-tui`: the click CLI's root and its workspace commands.

Commands that act on the platform go through the command language (`run_line`), the same single code path
the console's `:` bar and `--script` use: every verb is a command generated from the verb table
(`kinetic_tui.cli.verbs`). This module adds the workspace commands the language does not have (init,
up/down, status, config, pool, accelerators, build-image, help); `profile`, `jobs` and `doctor` are their
own modules. On a gke profile, init, up, down, status, pool and build-image drive the cluster's infrastructure
instead (`kinetic_tui.cli.gke`). Heavy imports (rich, textual, the core's backends) happen inside commands,
so `kinetic-tui --help` costs little more than importing click.

Exit codes: 0 success, 1 a command failed, 2 bad usage or a line that did not parse.
"""

from __future__ import annotations

import json
import shlex
from functools import partial
from typing import TYPE_CHECKING, Any

import click

from kinetic_tui.cli.doctor import doctor
from kinetic_tui.cli.jobs import jobs
from kinetic_tui.cli.output import CliError, GuardedGroup, UsageLineError, emit, guard, json_flag, run_line
from kinetic_tui.cli.profile import profile
from kinetic_tui.cli.verbs import VerbValue, add_verbs
from kinetic_tui.core.commands.verbs import FAMILIES, FIRST_WORDS, VERBS

if TYPE_CHECKING:
    from kinetic_tui.core.profiles import ResolvedInfra


@click.group(cls=GuardedGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--profile", help="profile to use (else KINETIC_PROFILE, else the current one)")
@click.option(
    "--script",
    "script",
    type=click.Path(allow_dash=True),  # read_script judges the path: one line and exit 2 when unusable
    help="run command-language lines from FILE ('-' for stdin) without the UI",
)
@click.option(
    "--output", type=click.Choice(["text", "json"]), default="text", show_default=True, help="--script output format"
)
@click.option("--keep-going", is_flag=True, help="--script: run the remaining lines after a failure")
@click.option("--demo", is_flag=True, help="open the console on a separate demo workspace")
@click.option("--readonly", is_flag=True, help="console: hide every mutating action")
@click.option("--no-mouse", is_flag=True, help="console: ignore the mouse")
@click.option("--debug", is_flag=True, help="show tracebacks")
@click.version_option(
    None, "--version", package_name="kinetic-tui", prog_name="kinetic-tui", message="%(prog)s %(version)s"
)
@click.pass_context
def main(
    ctx: click.Context,
    profile: str | None,
    script: str | None,
    output: str,
    keep_going: bool,
    demo: bool,
    readonly: bool,
    no_mouse: bool,
    debug: bool,
) -> None:
    """Operations console for ML workloads on accelerator clusters."""
    from kinetic_tui.core.paths import private_umask

    private_umask()  # this process is ours: everything it writes under the home is owner-only
    from kinetic_tui.core.profiles import choose_profile

    choose_profile(profile or None)  # one place decides, for every resolution in this process
    if ctx.invoked_subcommand is not None:
        return
    if script is not None:
        from kinetic_tui.script import read_script, run_script

        text = guard(lambda: read_script(script), UsageLineError)
        ctx.exit(run_script(text, output=output, keep_going=keep_going, debug=debug))
    try:
        from kinetic_tui.app import run_app
    except ImportError:
        raise CliError(
            "the terminal console is not built yet; use the CLI commands or --script (see kinetic-tui --help)"
        ) from None
    ctx.exit(run_app(demo=demo, readonly=readonly, mouse=not no_mouse))


# -- workspace -------------------------------------------------------------------------------------------


@main.command()
def init() -> None:
    """Create the workspace (KINETIC_HOME) with the `local` profile and the local cluster; on a gke profile,
    also say what `up` will create (nothing is created in the cloud)."""
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.paths import kinetic_home
    from kinetic_tui.core.profiles import ensure_profiles_file

    guard(ensure_profiles_file)
    guard(local_backend)
    click.echo(f"workspace ready at {kinetic_home()}")
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.init(infra)


def _gke_profile() -> ResolvedInfra | None:
    """The resolved infra when the active profile's backend has a cloud stack (GKE), else None (the local
    cluster)."""
    from kinetic_tui.core.backends.registry import profile_has_stack
    from kinetic_tui.core.profiles import resolve_infra

    infra = guard(resolve_infra)
    return infra if profile_has_stack(infra) else None


def _local_flags_only(**flags: Any) -> None:
    """Options that only mean something on a gke profile are refused on a local one, not ignored."""
    given = [name for name, value in flags.items() if value]
    if given:
        raise click.UsageError(f"{', '.join(given)} only apply to a gke profile (the local cluster has no stack)")


@main.command()
@click.option("--yes", is_flag=True, help="gke: apply the stack without asking")
@json_flag
def up(yes: bool, as_json: bool) -> None:
    """Bring the cluster up (local: the state database and the default pool; gke: apply the Pulumi stack)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.up(infra, yes, as_json)
        return
    run_line("pools", as_json)


@main.command()
@click.option("--yes", is_flag=True, help="do not ask (local: cancel active jobs; gke: destroy the stack)")
def down(yes: bool) -> None:
    """Take the cluster down (local: stop the supervisor, cancel active jobs, stop the fork server; gke:
    destroy the Pulumi stack)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.down(infra, yes)
        return
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.job_status import JobStatus
    from kinetic_tui.core.supervisor import process as supervisor

    backend = guard(local_backend)
    supervisor.stop()  # first: it must not start a queued job while the queue is being cancelled
    # jobs that finished while nobody looked are settled from their result files first: their results stand
    settled = guard(partial(backend.reconcile, start=False))
    # the queue first, and starting nothing: a node one cancel frees must not start a job the next one stops
    active = [r for s in (JobStatus.PENDING, JobStatus.RUNNING) for r in backend.jobs(status=s)]
    if active and not yes:
        click.confirm(f"cancel {len(active)} active jobs?", abort=True)
    for row in active:
        guard(partial(backend.cancel, row.job_id, start=False))
    launcher.shutdown_server()
    click.echo(f"local cluster down ({len(active)} jobs cancelled, {len(settled)} finished jobs settled)")


@main.command()
@click.argument("job", required=False, type=VerbValue(VERBS["status"].positionals[0]))
@json_flag
def status(job: str | None, as_json: bool) -> None:
    """Cluster status; with JOB, that job's status."""
    if job is not None:
        run_line(f"status {shlex.quote(job)}", as_json)
        return
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.backends.registry import profile_has_stack
    from kinetic_tui.core.profiles import resolve_infra
    from kinetic_tui.core.store import jobs_repo

    infra = guard(resolve_infra)
    if profile_has_stack(infra):
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.status(infra, as_json)
        return
    backend = guard(local_backend)
    backend.reconcile()
    counts = jobs_repo.status_counts(backend.store)
    summary = {
        "profile": infra.profile,
        "backend": infra.backend,
        "project": infra.project,
        "cluster": infra.cluster,
        "pools": len(backend.pools()),
        "jobs": counts,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"profile {infra.profile or '-'} · backend {infra.backend} · cluster {infra.cluster}")
    click.echo("jobs: " + (", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())) or "none"))
    run_line("pools")


@main.group()
def config() -> None:
    """Resolved configuration."""


@config.command("show")
@json_flag
def config_show(as_json: bool) -> None:
    """Every setting with the source it came from (argument, environment, profile, default)."""
    from kinetic_tui.core.profiles import resolve_infra

    rows = [{"field": f, "value": v, "source": s} for f, v, s in guard(resolve_infra).rows()]
    emit(rows, ("field", "value", "source"), as_json)


@main.command()
@json_flag
def accelerators(as_json: bool) -> None:
    """Every accelerator shape the parser knows (GPU counts, TPU topologies)."""
    from kinetic_tui.core.accelerators import list_accelerators

    emit(list_accelerators(), ("accelerator", "category", "count", "topology", "machine_type", "num_nodes"), as_json)


# -- pools and jobs: the command language ------------------------------------------------------------------


@main.group()
def pool() -> None:
    """Accelerator pools (local: emulated on this machine's CPU; gke: the cluster's node pools)."""


@pool.command("list")
@json_flag
def pool_list(as_json: bool) -> None:
    """List pools (local: nodes in use and queued jobs; gke: desired pools and which the stack has)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.pool_list(infra, as_json)
        return
    run_line("pools", as_json)


_NO_APPLY = click.option("--no-apply", is_flag=True, help="gke: only record the desired pools; `up` applies them")


@pool.command("add")
@click.argument("name")
@click.option("--accelerator", required=True, help="e.g. cpu, l4x2, v5litepod-2x2 (see `accelerators`)")
@click.option("--nodes", type=int, required=True, help="local: nodes; gke: the autoscaling maximum")
@click.option("--spot", is_flag=True)
@click.option("--min", "min_nodes", type=int, help="gke: the autoscaling minimum (default 0)")
@_NO_APPLY
@json_flag
def pool_add(
    name: str, accelerator: str, nodes: int, spot: bool, min_nodes: int | None, no_apply: bool, as_json: bool
) -> None:
    """Add a pool of NODES nodes (gke: record it and apply the stack)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.pool_add(infra, name, accelerator, nodes, min_nodes or 0, spot, not no_apply, as_json)
        return
    _local_flags_only(**{"--min": min_nodes is not None, "--no-apply": no_apply})
    run_line(
        shlex.join(["pool", "add", name, "--accelerator", accelerator, "--nodes", str(nodes)])
        + (" --spot" if spot else ""),
        as_json,
    )


@pool.command("remove")
@click.argument("name", type=VerbValue(VERBS["pool remove"].positionals[0]))
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@_NO_APPLY
@json_flag
def pool_remove(name: str, yes: bool, no_apply: bool, as_json: bool) -> None:
    """Remove a pool (local: refused while it has active jobs; gke: forget it and apply the stack)."""
    infra = _gke_profile()
    if infra is None:
        _local_flags_only(**{"--no-apply": no_apply})
    if not yes:
        click.confirm(f"remove pool {name}?", abort=True)
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.pool_remove(infra, name, not no_apply, as_json)
        return
    run_line(shlex.join(["pool", "remove", name]), as_json)


@main.command("build-image")
@click.option(
    "--requirements",
    type=click.Path(exists=True, dir_okay=False),
    help="requirements file baked into the image (default: ./requirements.txt if present)",
)
@click.option("--accelerator", default="cpu", show_default=True, help="selects the image category")
@json_flag
def build_image(requirements: str | None, accelerator: str, as_json: bool) -> None:
    """Build the bundled job image with Cloud Build unless its tag exists (GKE profiles only)."""
    infra = _gke_profile()
    if infra is None:
        raise CliError("build-image is for GKE profiles: the local backend runs jobs without images")
    from kinetic_tui.cli import gke as cli_gke

    cli_gke.build_image(infra, requirements, accelerator, as_json)


def _verb_words(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """`help pool <TAB>` offers the family's verbs, `help <TAB>` every first word."""
    done: tuple[str, ...] = tuple(ctx.params.get(param.name or "") or ())
    words = FAMILIES.get(done[0], ()) if len(done) == 1 else () if done else FIRST_WORDS
    return [word for word in words if word.startswith(incomplete)]


@main.command("help")
@click.argument("verb", nargs=-1, shell_complete=_verb_words)
def help_(verb: tuple[str, ...]) -> None:
    """The command language: every verb, or one verb's arguments and flags."""
    from kinetic_tui.core.commands import help_text

    click.echo(guard(lambda: help_text(" ".join(verb) or None)))


main.add_command(doctor)
main.add_command(profile)
main.add_command(jobs)
add_verbs(main)
