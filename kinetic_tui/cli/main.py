"""`kinetic-tui`: the click CLI's root and its workspace commands.

Commands that act on the platform go through the command language (`run_line`), the same single code path
the console's `:` bar and `--script` use: every verb is a command generated from the verb table
(`kinetic_tui.cli.verbs`). This module adds the workspace commands the language does not have (init,
up/down, status, config, accelerators, build-image, help); `profile`, `pool`, `jobs` and `doctor` are their
own modules. Kinetic's flags are all here too: `--project/--zone/--cluster` on the commands that act on a
target, `-y/--yes`, `up`/`init` saving the target as a profile (`kinetic_tui.cli.options` says how the
overrides resolve). On a gke profile, init, up, down, status, pool and build-image drive the cluster's infrastructure
instead (`kinetic_tui.cli.gke`). Heavy imports (rich, textual, the core's backends) happen inside commands,
so `kinetic-tui --help` costs little more than importing click.

Exit codes: 0 success, 1 a command failed, 2 bad usage or a line that did not parse.
"""

from __future__ import annotations

import json
import shlex
from functools import partial
from typing import TYPE_CHECKING

import click

from kinetic_tui.cli.doctor import doctor
from kinetic_tui.cli.images import build_image
from kinetic_tui.cli.jobs import jobs
from kinetic_tui.cli.options import INFRA_META, NEVER_ASKS, infra_options, note_local_overrides, yes_option
from kinetic_tui.cli.output import CliError, GuardedGroup, UsageLineError, emit, guard, json_flag, run_line
from kinetic_tui.cli.pool import gke_profile, pool
from kinetic_tui.cli.profile import profile
from kinetic_tui.cli.verbs import VerbValue, add_verbs
from kinetic_tui.core.commands.verbs import FAMILIES, FIRST_WORDS, VERBS

if TYPE_CHECKING:
    from kinetic_tui.core.accelerators import AcceleratorConfig


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
    from kinetic_tui.core.profiles import choose_infra, choose_profile

    choose_profile(profile or None)  # one place decides, for every resolution in this process
    choose_infra()  # a command's --project/--zone/--cluster set it again; an earlier command's must not linger
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


def _save_target(name: str | None, backend: str) -> None:
    """Save the resolved target (the command's overrides applied) as profile NAME, default the cluster's
    name, overwriting one of that name, and make it current, as Kinetic's `init` and `up` do."""
    from kinetic_tui.core.profiles import create_profile, resolve_infra

    infra = guard(lambda: resolve_infra(backend=backend))
    chosen = name or infra.cluster
    guard(
        lambda: create_profile(
            chosen, backend, infra.project, infra.zone, infra.cluster, infra.namespace, make_current=True, replace=True
        )
    )
    click.echo(f"profile {chosen} saved and in use ({backend}: project {infra.project}, cluster {infra.cluster})")


def _overrides_given() -> bool:
    return bool(click.get_current_context().meta.get(INFRA_META))


@main.command()
@infra_options(namespace=True)
@click.option(
    "--profile-name", help="save the target as this gke profile and use it (default with --project: the cluster's name)"
)
@NEVER_ASKS
def init(profile_name: str | None) -> None:
    """Create the workspace (KINETIC_HOME) with the `local` profile and the local cluster; with --project or
    --profile-name, also save that GKE target as a profile and use it; on a gke profile, say what `up` will
    create (nothing is created in the cloud)."""
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.paths import kinetic_home
    from kinetic_tui.core.profiles import ensure_profiles_file

    guard(ensure_profiles_file)
    guard(local_backend)
    click.echo(f"workspace ready at {kinetic_home()}")
    if profile_name is not None or "project" in click.get_current_context().meta.get(INFRA_META, {}):
        _save_target(profile_name, "gke")
    infra = gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.init(infra)
    else:
        note_local_overrides()


@main.command()
@infra_options(namespace=True)
@click.option("--accelerator", help="when the cluster has no pool of it yet, add one (named as Kinetic names pools)")
@click.option(
    "--min-nodes", type=click.IntRange(0), default=0, help="that pool's autoscaling minimum (gke; local: no effect)"
)
@click.option(
    "--profile-name",
    help="save the target as this profile and use it (gke default with --project/--zone/--cluster: the cluster's name)",
)
@click.option(
    "--force-destroy/--no-force-destroy",
    default=None,
    help="buckets are always created so that `down` empties them; --no-force-destroy is refused",
)
@yes_option("gke: apply the stack without asking")
@click.option("--preview", is_flag=True, help="print the plan and change nothing")
@json_flag
def up(
    accelerator: str | None,
    min_nodes: int,
    profile_name: str | None,
    force_destroy: bool | None,
    yes: bool,
    preview: bool,
    as_json: bool,
) -> None:
    """Bring the cluster up (local: the state database and the default pool; gke: apply the Pulumi stack)."""
    from kinetic_tui.cli.pool import default_nodes

    if force_destroy is False:
        raise click.UsageError("--no-force-destroy: the buckets here are always emptied by `down`; it is not supported")
    config = _accelerator(accelerator)
    infra = gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke
        from kinetic_tui.cli.pool import new_pool_name

        first = None
        if config is not None and accelerator is not None:
            size = default_nodes(config, min_nodes, gke=True)
            first = cli_gke.PoolPlan(new_pool_name(config), accelerator, size, min_nodes)
        cli_gke.up(infra, yes, as_json, first_pool=first, preview=preview)
        if not preview and (profile_name is not None or _overrides_given()):
            _save_target(profile_name, infra.backend)
        return
    note_local_overrides()
    if config is not None and accelerator is not None:
        _local_first_pool(config, accelerator, min_nodes, preview, as_json)
    if preview:
        click.echo("preview, nothing changed: the local cluster needs no stack", err=as_json)
        return
    if profile_name is not None:
        _save_target(profile_name, "local")
    run_line("pools", as_json)


def _accelerator(text: str | None) -> AcceleratorConfig | None:
    """`--accelerator`, parsed: a bad one is a usage error naming the valid choices."""
    from kinetic_tui.core.accelerators import parse_accelerator
    from kinetic_tui.core.errors import ValidationError

    if text is None:
        return None
    try:
        return parse_accelerator(text)
    except ValidationError as exc:
        raise click.BadParameter(str(exc), param_hint="--accelerator") from None


def _local_first_pool(
    config: AcceleratorConfig, accelerator: str, min_nodes: int, preview: bool, as_json: bool
) -> None:
    """`up --accelerator` locally: a pool of it unless one exists (the local `pool add` line)."""
    from kinetic_tui.cli.pool import default_nodes, new_pool_name
    from kinetic_tui.core.accelerators import parse_accelerator
    from kinetic_tui.core.backends.local.workspace import local_backend

    if any(parse_accelerator(row.accelerator) == config for row in guard(local_backend).pools()):
        return
    size = default_nodes(config, min_nodes, gke=False)
    line = shlex.join(["pool", "add", new_pool_name(config), "--accelerator", accelerator, "--nodes", str(size)])
    if preview:
        click.echo(f"preview: would run `{line}`", err=as_json)
        return
    run_line(line, as_json)


@main.command()
@infra_options()
@yes_option("do not ask (local: cancel active jobs; gke: destroy the stack)")
def down(yes: bool) -> None:
    """Take the cluster down (local: stop the supervisor, cancel active jobs, stop the fork server; gke:
    destroy the Pulumi stack)."""
    infra = gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.down(infra, yes)
        return
    note_local_overrides()
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
@infra_options()
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
    note_local_overrides()
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


@main.group(invoke_without_command=True)
@click.pass_context
def config(ctx: click.Context) -> None:
    """Resolved configuration (alone: `config show`)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(config_show, as_json=False)


@config.command("show")
@json_flag
def config_show(as_json: bool) -> None:
    """Every setting with the source it came from (argument, environment, profile, default)."""
    from kinetic_tui.core.profiles import resolve_infra

    rows = [{"field": f, "value": v, "source": s} for f, v, s in guard(resolve_infra).rows()]
    emit(rows, ("field", "value", "source"), as_json)


@main.command()
@infra_options()
@click.option("--live", is_flag=True, help="mark the accelerators the cluster has a pool of (provisioned)")
@json_flag
def accelerators(live: bool, as_json: bool) -> None:
    """Every accelerator shape the parser knows (GPU counts, TPU topologies)."""
    from kinetic_tui.core.accelerators import list_accelerators

    rows = list_accelerators()
    columns = ["accelerator", "category", "count", "topology", "machine_type", "num_nodes"]
    if live:
        provisioned = _provisioned()
        rows = [{**row, "provisioned": row["accelerator"] in provisioned} for row in rows]
        columns.append("provisioned")
    emit(rows, columns, as_json)


def _provisioned() -> set[str]:
    """The canonical (non-spot) accelerators the cluster has a pool of: local pools, or the gke stack's."""
    import dataclasses

    from kinetic_tui.core.accelerators import parse_accelerator

    infra = gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        texts = [spec.accelerator for spec in cli_gke.existing_specs(infra)]
    else:
        from kinetic_tui.core.backends.local.workspace import local_backend

        note_local_overrides()
        texts = [row.accelerator for row in guard(local_backend).pools()]
    return {str(dataclasses.replace(parse_accelerator(text), spot=False)) for text in texts}


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


main.add_command(build_image)
main.add_command(doctor)
main.add_command(profile)
main.add_command(jobs)
main.add_command(pool)
add_verbs(main)
