"""`kinetic-tui profile ...`: where work runs (backend, project, zone, cluster, namespace)."""

from __future__ import annotations

from typing import Any

import click

from kinetic_tui.cli.output import emit, guard, json_flag

COLUMNS = ("name", "current", "backend", "project", "zone", "cluster", "namespace")


@click.group()
def profile() -> None:
    """Profiles: where work runs (backend, project, zone, cluster, namespace)."""


def _profile_row(p: Any, current: str | None) -> dict[str, Any]:
    return {"name": p.name, "current": p.name == current, **p.fields()}


def _profile_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from kinetic_tui.core.errors import KineticError
    from kinetic_tui.core.profiles import list_profiles

    try:
        return [p.name for p in list_profiles() if p.name.startswith(incomplete)]
    except KineticError:  # a broken profiles file offers nothing; the command itself reports it
        return []


@profile.command("create")
@click.argument("name", required=False)
@click.option("--backend", type=click.Choice(["local", "gke"]), default="local", show_default=True)
@click.option("--project")
@click.option("--zone")
@click.option("--cluster")
@click.option("--namespace")
@click.option("--use", "make_current", is_flag=True, help="make it the current profile")
@click.option("--force", is_flag=True, help="overwrite an existing profile of that name")
def profile_create(
    name: str | None,
    backend: str,
    project: str | None,
    zone: str | None,
    cluster: str | None,
    namespace: str | None,
    make_current: bool,
    force: bool,
) -> None:
    """Create a profile (NAME is asked for when not given)."""
    from kinetic_tui.core.profiles import create_profile

    chosen = name if name is not None else click.prompt("Profile name", type=str)
    created = guard(
        lambda: create_profile(
            chosen, backend, project, zone, cluster, namespace, make_current=make_current, replace=force
        )
    )
    click.echo(f"profile {created.name} created" + (" and in use" if make_current else ""))


@profile.command("ls")
@json_flag
def profile_ls(as_json: bool) -> None:
    """List profiles."""
    from kinetic_tui.core.profiles import current_profile_name, list_profiles

    current = guard(current_profile_name)
    rows = [_profile_row(p, current) for p in guard(list_profiles)]
    emit(rows, COLUMNS, as_json)


@profile.command("use")
@click.argument("name", shell_complete=_profile_names)
def profile_use(name: str) -> None:
    """Make NAME the current profile."""
    from kinetic_tui.core.profiles import use_profile

    click.echo(f"using profile {guard(lambda: use_profile(name)).name}")


@profile.command("unset")
def profile_unset() -> None:
    """Clear the current profile (then `local` is current)."""
    from kinetic_tui.core.profiles import unset_profile

    previous = guard(unset_profile)
    click.echo(f"cleared the current profile (was {previous}); local is current" if previous else "local is current")


@profile.command("show")
@click.argument("name", required=False, shell_complete=_profile_names)
@json_flag
def profile_show(name: str | None, as_json: bool) -> None:
    """Show a profile (default: the active one)."""
    from kinetic_tui.core.profiles import current_profile_name, show_profile

    shown = guard(lambda: show_profile(name))
    emit([_profile_row(shown, guard(current_profile_name))], COLUMNS, as_json)


@profile.command("rm")
@click.argument("name", shell_complete=_profile_names)
@click.option("--yes", "-y", is_flag=True, expose_value=False, help="accepted as Kinetic's; rm never asks here")
def profile_rm(name: str) -> None:
    """Remove a profile (not the current one)."""
    from kinetic_tui.core.profiles import remove_profile

    click.echo(f"profile {guard(lambda: remove_profile(name)).name} removed")
