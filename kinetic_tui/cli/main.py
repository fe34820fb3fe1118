"""`kinetic-tui`: the click CLI (SPEC 6).

Commands that act on the platform go through the command language (`run_line`), the same single code path
the console's `:` bar and `--script` use; the CLI only adds workspace commands the language does not have
(init, up/down, config, profiles, accelerators, jobs cleanup). On a gke profile, init, up, down, status,
pool and build-image drive the cluster's infrastructure instead (`kinetic_tui.cli.gke`). Heavy imports (rich, textual, the core's
backends) happen inside commands, so `kinetic-tui --help` costs little more than importing click.

Exit codes: 0 success, 1 a command failed, 2 bad usage or a line that did not parse.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from kinetic_tui.core.profiles import ResolvedInfra

OK, FAILED, USAGE = 0, 1, 2


class CliError(click.ClickException):
    exit_code = FAILED

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def guard(action: Callable[[], Any]) -> Any:
    """Turn deliberate core errors into one-line messages (the traceback only with --debug)."""
    from kinetic_tui.core.errors import KineticError

    try:
        return action()
    except KineticError as exc:
        if click.get_current_context().find_root().params.get("debug"):
            raise
        raise CliError(str(exc)) from None


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool, title: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(list(rows), indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    Console().print(table)


def run_line(line: str, as_json: bool = False) -> None:
    """Run one command-language line through the console service, as `--script` would."""
    from kinetic_tui.script import run_script

    ctx = click.get_current_context()
    code = run_script(line, output="json" if as_json else "text", keep_going=False,
                      debug=bool(ctx.find_root().params.get("debug")))
    if code:
        ctx.exit(code)


def _json_flag(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="print JSON for programs")(func)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--profile", help="profile to use (else KINETIC_PROFILE, else the current one)")
@click.option("--script", "script", type=click.Path(dir_okay=False, allow_dash=True),
              help="run command-language lines from FILE ('-' for stdin) without the UI")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="--script output format")
@click.option("--keep-going", is_flag=True, help="--script: run the remaining lines after a failure")
@click.option("--demo", is_flag=True, help="open the console on a separate demo workspace")
@click.option("--readonly", is_flag=True, help="console: hide every mutating action")
@click.option("--no-mouse", is_flag=True, help="console: ignore the mouse")
@click.option("--debug", is_flag=True, help="show tracebacks")
@click.pass_context
def main(ctx: click.Context, profile: str | None, script: str | None, output: str, keep_going: bool,
         demo: bool, readonly: bool, no_mouse: bool, debug: bool) -> None:
    """Operations console for ML workloads on accelerator clusters."""
    if profile:
        import os

        os.environ["KINETIC_PROFILE"] = profile  # one place decides: resolve_infra reads it
    if ctx.invoked_subcommand is not None:
        return
    if script is not None:
        from kinetic_tui.script import read_script, run_script

        text = guard(lambda: read_script(script))
        ctx.exit(run_script(text, output=output, keep_going=keep_going, debug=debug))
    try:
        from kinetic_tui.app import run_app
    except ImportError:
        raise CliError("the terminal console is not built yet; use the CLI commands or --script "
                       "(see kinetic-tui --help)") from None
    ctx.exit(run_app(demo=demo, readonly=readonly, mouse=not no_mouse))


# -- workspace -------------------------------------------------------------------------------------------


@main.command()
def init() -> None:
    """Create the workspace (KINETIC_HOME) with the `local` profile and the local cluster; on a gke profile,
    also say what `up` will create (nothing is created in the cloud)."""
    from kinetic_tui.core.paths import kinetic_home
    from kinetic_tui.core.profiles import ensure_profiles_file
    from kinetic_tui.core.backends.local.workspace import local_backend

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
@_json_flag
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
    """Take the cluster down (local: cancel active jobs and stop the background processes; gke: destroy the
    Pulumi stack)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.down(infra, yes)
        return
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.job_status import JobStatus
    from kinetic_tui.core.backends.local.workspace import local_backend

    backend = guard(local_backend)
    active = [r for s in (JobStatus.RUNNING, JobStatus.PENDING) for r in backend.jobs(status=s)]
    if active and not yes:
        click.confirm(f"cancel {len(active)} active jobs?", abort=True)
    for row in active:
        guard(lambda row=row: backend.cancel(row.job_id))
    launcher.shutdown_server()
    click.echo(f"local cluster down ({len(active)} jobs cancelled)")


@main.command()
@click.argument("job", required=False)
@_json_flag
def status(job: str | None, as_json: bool) -> None:
    """Cluster status; with JOB, that job's status."""
    if job is not None:
        run_line(f"status {shlex.quote(job)}", as_json)
        return
    from kinetic_tui.core.backends.registry import profile_has_stack
    from kinetic_tui.core.profiles import resolve_infra
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.store import jobs_repo

    infra = guard(resolve_infra)
    if profile_has_stack(infra):
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.status(infra, as_json)
        return
    backend = guard(local_backend)
    backend.reconcile()
    counts = jobs_repo.status_counts(backend.store)
    summary = {"profile": infra.profile, "backend": infra.backend, "project": infra.project,
               "cluster": infra.cluster, "pools": len(backend.pools()), "jobs": counts}
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
@_json_flag
def config_show(as_json: bool) -> None:
    """Every setting with the source it came from (argument, environment, profile, default)."""
    from kinetic_tui.core.profiles import resolve_infra

    rows = [{"field": f, "value": v, "source": s} for f, v, s in guard(resolve_infra).rows()]
    emit(rows, ("field", "value", "source"), as_json)


@main.command()
@_json_flag
def accelerators(as_json: bool) -> None:
    """Every accelerator shape the parser knows (GPU counts, TPU topologies)."""
    from kinetic_tui.core.accelerators import list_accelerators

    emit(list_accelerators(), ("accelerator", "category", "count", "topology", "machine_type", "num_nodes"),
          as_json)


# -- profiles ----------------------------------------------------------------------------------------------


@main.group()
def profile() -> None:
    """Profiles: where work runs (backend, project, zone, cluster, namespace)."""


def _profile_row(p: Any, current: str | None) -> dict[str, Any]:
    return {"name": p.name, "current": p.name == current, **p.fields()}


@profile.command("create")
@click.argument("name")
@click.option("--backend", type=click.Choice(["local", "gke"]), default="local", show_default=True)
@click.option("--project")
@click.option("--zone")
@click.option("--cluster")
@click.option("--namespace")
@click.option("--use", "make_current", is_flag=True, help="make it the current profile")
def profile_create(name: str, backend: str, project: str | None, zone: str | None, cluster: str | None,
                   namespace: str | None, make_current: bool) -> None:
    """Create a profile."""
    from kinetic_tui.core.profiles import create_profile

    created = guard(lambda: create_profile(name, backend, project, zone, cluster, namespace,
                                            make_current=make_current))
    click.echo(f"profile {created.name} created" + (" and in use" if make_current else ""))


@profile.command("ls")
@_json_flag
def profile_ls(as_json: bool) -> None:
    """List profiles."""
    from kinetic_tui.core.profiles import current_profile_name, list_profiles

    current = guard(current_profile_name)
    rows = [_profile_row(p, current) for p in guard(list_profiles)]
    emit(rows, ("name", "current", "backend", "project", "zone", "cluster", "namespace"), as_json)


@profile.command("use")
@click.argument("name")
def profile_use(name: str) -> None:
    """Make NAME the current profile."""
    from kinetic_tui.core.profiles import use_profile

    click.echo(f"using profile {guard(lambda: use_profile(name)).name}")


@profile.command("unset")
def profile_unset() -> None:
    """Clear the current profile (then only arguments, environment and defaults apply)."""
    from kinetic_tui.core.profiles import unset_profile

    guard(unset_profile)
    click.echo("no current profile")


@profile.command("show")
@click.argument("name", required=False)
@_json_flag
def profile_show(name: str | None, as_json: bool) -> None:
    """Show a profile (default: the active one)."""
    from kinetic_tui.core.profiles import current_profile_name, show_profile

    shown = guard(lambda: show_profile(name))
    emit([_profile_row(shown, guard(current_profile_name))],
          ("name", "current", "backend", "project", "zone", "cluster", "namespace"), as_json)


@profile.command("rm")
@click.argument("name")
def profile_rm(name: str) -> None:
    """Remove a profile (not the current one)."""
    from kinetic_tui.core.profiles import remove_profile

    click.echo(f"profile {guard(lambda: remove_profile(name)).name} removed")


# -- pools and jobs: the command language ------------------------------------------------------------------


@main.group()
def pool() -> None:
    """Accelerator pools (local: emulated on this machine's CPU; gke: the cluster's node pools)."""


@pool.command("list")
@_json_flag
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
@_json_flag
def pool_add(name: str, accelerator: str, nodes: int, spot: bool, min_nodes: int | None, no_apply: bool,
             as_json: bool) -> None:
    """Add a pool of NODES nodes (gke: record it and apply the stack)."""
    infra = _gke_profile()
    if infra is not None:
        from kinetic_tui.cli import gke as cli_gke

        cli_gke.pool_add(infra, name, accelerator, nodes, min_nodes or 0, spot, not no_apply, as_json)
        return
    _local_flags_only(**{"--min": min_nodes is not None, "--no-apply": no_apply})
    run_line(shlex.join(["pool", "add", name, "--accelerator", accelerator, "--nodes", str(nodes)])
             + (" --spot" if spot else ""), as_json)


@pool.command("remove")
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@_NO_APPLY
@_json_flag
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


@main.group()
def jobs() -> None:
    """Jobs: list, inspect, cancel, clean up."""


@jobs.command("list")
@click.option("--status", "status_", help="PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED")
@_json_flag
def jobs_list(status_: str | None, as_json: bool) -> None:
    run_line("jobs" + (f" --status {shlex.quote(status_)}" if status_ else ""), as_json)


def _job_verb(verb: str, doc: str, extra: Iterable[Callable[..., Any]] = ()) -> None:
    def command(job: str, as_json: bool, **options: Any) -> None:
        words = [verb, job]
        for key, value in options.items():
            if value is True:
                words.append(f"--{key.replace('_', '-')}")
            elif value not in (None, False):
                words += [f"--{key.replace('_', '-')}", str(value)]
        run_line(shlex.join(words), as_json)

    command.__doc__ = doc
    decorated: Callable[..., Any] = _json_flag(click.argument("job")(command))
    for option in extra:
        decorated = option(decorated)
    jobs.command(verb)(decorated)


_job_verb("status", "A job's status.")
_job_verb("logs", "A job's log.", (click.option("--tail", type=int), click.option("--follow", is_flag=True)))
_job_verb("result", "A job's result, or its remote traceback and failing phase.")
_job_verb("cancel", "Cancel a job (SIGTERM, then SIGKILL after a grace period).")


@jobs.command("cleanup")
@click.argument("job")
def jobs_cleanup(job: str) -> None:
    """Remove a finished job's inputs and working directories (its result, output and logs stay)."""
    from kinetic_tui.core.jobs import attach

    guard(lambda: attach(job).cleanup())
    click.echo(f"cleaned up {job}")


@main.command("build-image")
@click.option("--requirements", type=click.Path(exists=True, dir_okay=False),
              help="requirements file baked into the image (default: ./requirements.txt if present)")
@click.option("--accelerator", default="cpu", show_default=True, help="selects the image category")
@_json_flag
def build_image(requirements: str | None, accelerator: str, as_json: bool) -> None:
    """Build the bundled job image with Cloud Build unless its tag exists (GKE profiles only)."""
    infra = _gke_profile()
    if infra is None:
        raise CliError("build-image is for GKE profiles: the local backend runs jobs without images")
    from kinetic_tui.cli import gke as cli_gke

    cli_gke.build_image(infra, requirements, accelerator, as_json)


# -- every other verb of the command language, verbatim -------------------------------------------------------

_CLI_OWNED = {"status", "pools", "pool add", "pool remove", "jobs", "help"}


def _add_verb_passthrough() -> None:
    from kinetic_tui.core.commands.grammar import VERBS

    groups: dict[str, click.Group] = {"pool": pool}
    for verb in VERBS.values():
        if verb.name in _CLI_OWNED:
            continue
        words = verb.name.split()
        parent: click.Group = main
        if len(words) == 2:
            parent = groups.get(words[0]) or main.group(words[0], help=f"{words[0]} commands")(lambda: None)
            groups[words[0]] = parent

        def command(args: tuple[str, ...], as_json: bool, _verb: str = verb.name) -> None:
            run_line(shlex.join([*_verb.split(), *args]), as_json)

        parent.command(words[-1], help=verb.help, context_settings={"ignore_unknown_options": True})(
            _json_flag(click.argument("args", nargs=-1, type=click.UNPROCESSED)(command)))


@main.command("help")
@click.argument("verb", nargs=-1)
def help_(verb: tuple[str, ...]) -> None:
    """The command language: every verb, or one verb's arguments and flags."""
    from kinetic_tui.core.commands import help_text

    click.echo(guard(lambda: help_text(" ".join(verb) or None)))


_add_verb_passthrough()
