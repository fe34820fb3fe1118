"""The GKE-profile halves of `init`, `up`, `down`, `status`, `pool add|remove|list` and `build-image`.

On a gke profile these commands drive the cluster's Pulumi stack (`kinetic_tui.infra.state`) from the desired
node pools kept in state.db (`kinetic_tui.core.backends.gke.pools`), and build job images
(`kinetic_tui.infra.container_builder`). `kinetic_tui.cli.main` decides which half runs; everything
cloud-facing is reached through three module-level hooks that tests replace: `stack_backend()`,
`image_ensurer(infra)` and `cluster_backend(infra)`.

Decisions made here:
- `pool add|remove` first read the stack (the real backend's bounded preflight runs there), so a missing
  Pulumi CLI, credentials or state bucket is reported before anything is recorded; then they record the
  pool and apply. If the apply itself fails, the recorded pool stays: it is the desired state, and the
  error says that `up` converges to it once the cause is fixed.
- `up` asks before changing billable resources unless `--yes`; `down` always asks unless `--yes`.
- `status` needs the stack state (exit 1 when it cannot be read); the cluster's jobs are best effort,
  bounded by STATUS_TIMEOUT and STATUS_JOB_LIMIT, and an unreachable cluster is one line, exit 0.
- `build-image` reads `--requirements FILE`, else `./requirements.txt` when there is one.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from kinetic_tui.cli.output import CliError, emit, guard

if TYPE_CHECKING:
    from kinetic_tui.core.backends.gke.backend import GkeBackend
    from kinetic_tui.core.backends.gke.pools import GkePools
    from kinetic_tui.core.profiles import ResolvedInfra
    from kinetic_tui.infra import InfraConfig, NodePoolSpec
    from kinetic_tui.infra.container_builder import ImageBuild, ImageInputs
    from kinetic_tui.infra.state import StackBackend, StackState

STATUS_TIMEOUT = 15.0  # seconds for the whole cluster query of `status`
STATUS_JOB_LIMIT = 20  # newest jobs whose status `status` reads (each costs a few API calls)
POOL_COLUMNS = ("name", "accelerator", "spot", "min_nodes", "max_nodes", "reservation", "exists")
T = TypeVar("T")


# -- hooks: tests replace these -------------------------------------------------------------------------


def stack_backend() -> StackBackend:
    """The Pulumi Automation API backend, state in gs://{project}-kinetic-state."""
    from kinetic_tui.infra.state import AutomationBackend

    return AutomationBackend()


def image_ensurer(infra: ResolvedInfra) -> Callable[[ImageInputs], ImageBuild]:
    """Artifact Registry lookup, then Cloud Build, into the cluster's repository."""
    from kinetic_tui.infra.container_builder import ensure_image

    return partial(ensure_image, project=infra.project, region=infra.region, cluster=infra.cluster)


def cluster_backend(infra: ResolvedInfra) -> GkeBackend:
    """The cluster's kinetic jobs: Kubernetes API (kubeconfig context or KINETIC_K8S_HOST) + jobs bucket."""
    from kinetic_tui.core.backends.gke.backend import GkeBackend
    from kinetic_tui.core.backends.gke.k8s_client import clients_for
    from kinetic_tui.core.storage import GcsStorage

    return GkeBackend(clients_for(infra), GcsStorage(infra.jobs_bucket, project=infra.project), infra.namespace)


# -- shared steps --------------------------------------------------------------------------------------------


def desired_pools(infra: ResolvedInfra) -> GkePools:
    from kinetic_tui.core.backends.gke.pools import GkePools
    from kinetic_tui.core.backends.local.workspace import store

    return GkePools(guard(store), infra.project, infra.cluster)


def infra_config(infra: ResolvedInfra) -> InfraConfig:
    """The stack's config from the profile and the recorded pools; a bad profile value says how to fix it."""
    from kinetic_tui.core.errors import KineticError
    from kinetic_tui.infra import InfraConfig

    pools = guard(desired_pools(infra).list)
    try:
        return InfraConfig.from_infra(infra, pools)
    except KineticError as exc:
        where = f"profile {infra.profile}" if infra.profile else "the gke settings"
        raise CliError(
            f"{exc}; fix {where} (see `kinetic-tui config show`) or switch back with: kinetic-tui profile use local"
        ) from None


def _progress(as_json: bool) -> Callable[[str], None]:
    """Pulumi's progress lines go to stdout for people, to stderr when stdout carries JSON."""
    return lambda line: click.echo(line, err=as_json)


def _changes(changes: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {operation}" for operation, count in sorted(changes.items()) if count) or "no changes"


def _apply(config: InfraConfig, as_json: bool) -> dict[str, Any]:
    from kinetic_tui.infra.state import apply_update

    result = guard(lambda: apply_update(config, stack_backend(), on_output=_progress(as_json)))
    return {"stack": result.ref.stack, "changes": dict(result.changes), "outputs": dict(result.outputs)}


def _report_update(update: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(update, indent=2, default=str))
        return
    click.echo(f"stack {update['stack']}: {_changes(update['changes'])}")
    for name, value in sorted(update["outputs"].items()):
        click.echo(f"  {name}: {value}")


def _pool_row(spec: NodePoolSpec, existing: Sequence[str] | None) -> dict[str, Any]:
    return {
        "name": spec.name,
        "accelerator": spec.accelerator,
        "spot": spec.is_spot(),
        "min_nodes": spec.min_nodes,
        "max_nodes": spec.max_nodes,
        "exists": None if existing is None else spec.name in existing,
        "reservation": spec.reservation,
    }


# -- commands ------------------------------------------------------------------------------------------------


def init(infra: ResolvedInfra) -> None:
    """Nothing in the cloud: say what `up` will create for this profile."""
    click.echo(
        f"profile {infra.profile or '-'} uses GKE; nothing was created in the cloud. `kinetic-tui up` will "
        f"apply {_plan(infra_config(infra))}"
    )


def _plan(config: InfraConfig) -> str:
    """What applying `config` creates or keeps, in one sentence."""
    pools = ", ".join(
        f"{p.name} ({p.accelerator}, {p.min_nodes}-{p.max_nodes} nodes{', spot' if p.is_spot() else ''})"
        for p in config.node_pools
    )
    return (
        f"stack {config.stack} (state in {config.state_url}): cluster {config.cluster} in "
        f"{config.zone} of project {config.project}, image repository {config.repository_url}, "
        f"buckets gs://{config.jobs_bucket} and gs://{config.builds_bucket}, node pools: system"
        + (f", {pools}" if pools else " only (add accelerators with `kinetic-tui pool add`)")
    )


def up(
    infra: ResolvedInfra, yes: bool, as_json: bool, first_pool: PoolPlan | None = None, preview: bool = False
) -> None:
    """Apply the stack; `first_pool` is recorded first when the cluster has no pool yet (Kinetic's
    `up --accelerator`); `preview` prints the plan and changes nothing."""
    from kinetic_tui.infra import InfraConfig, NodePoolSpec

    config = infra_config(infra)
    if first_pool is not None and not config.node_pools:
        plan = first_pool
        if preview:
            spec = NodePoolSpec(plan.name, plan.accelerator, min_nodes=plan.min_nodes, max_nodes=plan.max_nodes)
            config = InfraConfig(config.project, config.zone, config.cluster, (spec,))
        else:
            guard(lambda: desired_pools(infra).add(plan.name, plan.accelerator, plan.max_nodes, plan.min_nodes))
            config = infra_config(infra)
    if preview:
        _say(
            as_json, {"preview": True, "stack": config.stack}, f"preview, nothing changed: would apply {_plan(config)}"
        )
        return
    if not yes:
        names = ", ".join(["system", *(p.name for p in config.node_pools)])
        click.confirm(
            f"create or update stack {config.stack} (cluster {config.cluster}, node pools {names}) "
            f"in project {config.project}?",
            abort=True,
        )
    _report_update(_apply(config, as_json), as_json)


def down(infra: ResolvedInfra, yes: bool) -> None:
    from kinetic_tui.infra.state import apply_destroy

    config = infra_config(infra)
    if not yes:
        click.confirm(
            f"destroy stack {config.stack}: cluster {config.cluster}, its node pools and the buckets "
            f"gs://{config.jobs_bucket} and gs://{config.builds_bucket} with every object?",
            abort=True,
        )
    result = guard(lambda: apply_destroy(config, stack_backend(), on_output=_progress(False)))
    click.echo(f"stack {result.ref.stack} destroyed: {_changes(result.changes)}")


def within(seconds: float, action: Callable[[], T]) -> T:
    """`action()` in a daemon thread, TimeoutError after `seconds`: an API server that never answers must
    not hang the CLI, and a daemon thread left behind does not keep the process alive."""
    value: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            value.append(action())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="kinetic-cluster-query")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g}s")
    if error:
        raise error[0]
    return value[0]


def cluster_jobs(infra: ResolvedInfra) -> tuple[dict[str, int], int]:
    """(status -> count over the newest STATUS_JOB_LIMIT kinetic jobs, number of jobs in the cluster)."""
    backend = cluster_backend(infra)
    ids = backend.job_ids()
    counts: Counter[str] = Counter()
    for job_id in ids[:STATUS_JOB_LIMIT]:
        try:
            counts[backend.refresh(job_id).status.value] += 1
        except LookupError:  # a workload whose handle.json is not in this profile's bucket
            counts["UNKNOWN"] += 1
    return dict(counts), len(ids)


def _cluster_summary(infra: ResolvedInfra) -> tuple[dict[str, int] | None, int, str | None]:
    try:
        counts, total = within(STATUS_TIMEOUT, lambda: cluster_jobs(infra))
    except Exception as exc:  # any failure to reach the cluster is reported, never raised
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (
            None,
            0,
            (
                f"cluster {infra.cluster} unreachable ({type(exc).__name__}: {detail}); check "
                f"`gcloud container clusters get-credentials {infra.cluster} --zone {infra.zone} "
                f"--project {infra.project}` and the network"
            ),
        )
    return counts, total, None


def status(infra: ResolvedInfra, as_json: bool) -> None:
    from kinetic_tui.infra.state import load_state

    config = infra_config(infra)
    state: StackState = guard(lambda: load_state(config, stack_backend()))
    counts, total, problem = _cluster_summary(infra) if state.exists else (None, 0, None)
    summary = {
        "profile": infra.profile,
        "backend": infra.backend,
        "project": infra.project,
        "zone": infra.zone,
        "cluster": infra.cluster,
        "stack": {
            "name": config.stack,
            "state": config.state_url,
            "exists": state.exists,
            "last_result": state.last_result,
            "last_update": state.last_update.isoformat() if state.last_update else None,
            "outputs": dict(state.outputs),
        },
        "jobs": counts,
        "jobs_total": total,
        "cluster_error": problem,
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2, default=str))
        return
    click.echo(
        f"profile {infra.profile or '-'} · backend gke · project {infra.project} · cluster {infra.cluster} "
        f"· zone {infra.zone}"
    )
    if not state.exists:
        click.echo(f"stack {config.stack} does not exist in {config.state_url} yet; create it with: kinetic-tui up")
        return
    when = f" at {state.last_update:%Y-%m-%d %H:%M:%S %Z}".rstrip() if state.last_update else ""
    click.echo(f"stack {config.stack}: last update {state.last_result or 'unknown'}{when}")
    for name, value in sorted(state.outputs.items()):
        click.echo(f"  {name}: {value}")
    if counts is None:  # the cluster did not answer; `problem` says why
        click.echo(problem)
    else:
        shown = f" (newest {STATUS_JOB_LIMIT} of {total})" if total > STATUS_JOB_LIMIT else ""
        click.echo("jobs: " + (", ".join(f"{k.lower()} {v}" for k, v in sorted(counts.items())) or "none") + shown)


def existing_specs(infra: ResolvedInfra) -> list[NodePoolSpec]:
    """The desired pools the stack has created (`accelerators --live`)."""
    config = infra_config(infra)
    existing = _existing_pools(config) or []
    return [spec for spec in config.node_pools if spec.name in existing]


def _existing_pools(config: InfraConfig) -> list[str] | None:
    """The node pools the stack last created, or None when there is no stack."""
    from kinetic_tui.infra.state import load_state

    state = guard(lambda: load_state(config, stack_backend()))
    return list(state.outputs.get("node_pools") or []) if state.exists else None


def _change_pools(
    infra: ResolvedInfra, change: Callable[[GkePools], NodePoolSpec], verb: str, apply: bool, as_json: bool
) -> None:
    """Check the stack is reachable (when applying), change the record, then converge the stack to it."""
    config = infra_config(infra)  # a bad profile is refused before anything is recorded
    if apply:
        _existing_pools(config)  # the stack preflight, for the same reason
    pools = desired_pools(infra)
    spec = guard(lambda: change(pools))
    row = _pool_row(spec, None)
    if not apply:
        _say(
            as_json,
            {"pool": row, "applied": False},
            f"node pool {spec.name} {verb} (not applied; run `kinetic-tui up` to apply)",
        )
        return
    try:
        update = _apply(infra_config(infra), as_json)
    except CliError as exc:
        raise CliError(
            f"node pool {spec.name} {verb}, but applying stack {infra.stack} failed: {exc.message}; "
            f"run `kinetic-tui up` once that is fixed"
        ) from None
    _say(
        as_json,
        {"pool": row, "applied": True, **update},
        f"node pool {spec.name} {verb}; stack {update['stack']}: {_changes(update['changes'])}",
    )


def _say(as_json: bool, document: Mapping[str, Any], text: str) -> None:
    click.echo(json.dumps(document, indent=2, default=str) if as_json else text)


@dataclass(frozen=True)
class PoolPlan:
    """A node pool `pool add` is asked for."""

    name: str
    accelerator: str
    max_nodes: int
    min_nodes: int = 0
    spot: bool = False
    reservation: str | None = None


def pool_add(infra: ResolvedInfra, plan: PoolPlan, apply: bool, preview: bool, as_json: bool) -> None:
    """Record the pool and apply the stack; with `preview`, print the stack's pools after the add instead."""
    from kinetic_tui.core.errors import KineticError
    from kinetic_tui.infra import NodePoolSpec

    try:  # validate before the (slow) stack preflight: bad input is answered at once
        spec = NodePoolSpec(
            plan.name,
            plan.accelerator,
            min_nodes=plan.min_nodes,
            max_nodes=plan.max_nodes,
            spot=plan.spot,
            reservation=plan.reservation,
        )
    except KineticError as exc:
        raise CliError(str(exc)) from None
    if preview:
        config = infra_config(infra)
        names = [p.name for p in config.node_pools]
        if spec.name in names:
            raise CliError(f"node pool {spec.name!r} already exists in cluster {config.cluster!r}")
        _say(
            as_json,
            {"preview": True, "pool": _pool_row(spec, None), "pools_after": [*names, spec.name]},
            f"preview, nothing changed: would add node pool {spec.name} ({spec.accelerator}, "
            f"{spec.min_nodes}-{spec.max_nodes} nodes) to stack {config.stack}; pools after: "
            + ", ".join(["system", *names, spec.name]),
        )
        return
    _change_pools(
        infra,
        lambda pools: pools.add(
            plan.name, plan.accelerator, plan.max_nodes, plan.min_nodes, plan.spot, plan.reservation
        ),
        "added",
        apply,
        as_json,
    )


def pool_remove(infra: ResolvedInfra, name: str, apply: bool, as_json: bool) -> None:
    guard(lambda: desired_pools(infra).get(name))  # an unknown name is answered before the stack preflight
    _change_pools(infra, lambda pools: pools.remove(name), "removed", apply, as_json)


def pool_list(infra: ResolvedInfra, as_json: bool) -> None:
    """The desired pools, with whether the stack has each one (blank when the state cannot be read)."""
    config = infra_config(infra)
    try:
        existing = _existing_pools(config)
        note = None if existing is not None else f"stack {config.stack} does not exist yet: `kinetic-tui up` creates it"
    except CliError as exc:
        existing, note = None, f"stack state unreadable, existence unknown: {exc.message}"
    emit(
        [_pool_row(spec, existing) for spec in config.node_pools],
        POOL_COLUMNS,
        as_json,
        title=f"desired node pools of {config.cluster}",
    )
    if note:
        click.echo(note, err=True)


def build_image(
    infra: ResolvedInfra, requirements: str | None, accelerator: str, as_json: bool, template: str | None = None
) -> None:
    """The bundled image of `accelerator`, built unless its tag exists; `template` replaces the Dockerfile's."""
    from kinetic_tui.infra.container_builder import image_inputs, image_tag

    config = infra_config(infra)
    inputs = guard(lambda: image_inputs(accelerator, _requirements_text(requirements), template=template))
    tag = image_tag(config.project, config.region, config.cluster, inputs)
    if not as_json:
        click.echo(f"image {tag}")
    build = guard(lambda: image_ensurer(infra)(inputs))
    if as_json:
        click.echo(
            json.dumps(
                {"tag": build.tag, "built": build.built, "build_id": build.build_id, "log_url": build.log_url}, indent=2
            )
        )
    elif build.built:
        click.echo(f"built {build.tag} (Cloud Build {build.build_id}, logs: {build.log_url})")
    else:
        click.echo(f"{build.tag} is up to date")


def _requirements_text(requirements: str | None) -> str:
    path = Path(requirements or "requirements.txt")
    if requirements is None and not path.is_file():
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read requirements file {path}: {exc}") from None
