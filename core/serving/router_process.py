"""The router's process (`python -m kinetic_tui.core.serving.router_process NAME`), started and watched
by the endpoint's controller in the workspace supervisor; it serves until SIGTERM, finishing what is in
flight. It records its pid and port in the store once it listens, and keeps that supervisor alive
(`keep_supervisor`)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from aiohttp import web

from kinetic_tui.core.errors import one_line
from kinetic_tui.core.paths import kinetic_home, private_umask
from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving.router import Router
from kinetic_tui.core.serving.router_pid import router_record
from kinetic_tui.core.serving.signals import until_stopped
from kinetic_tui.core.store import Store, serving_repo
from kinetic_tui.core.supervisor import process as supervisor

SUPERVISOR_CHECK = 0.5  # seconds between the router's checks that the workspace supervisor runs


async def keep_supervisor(store: Store, home: Path, every: float = SUPERVISOR_CHECK) -> None:
    """Bring the workspace supervisor back whenever none runs, through `revive`, as the CLI does when it
    opens the home: clients that only speak HTTP never open it, so without this a supervisor that died
    stayed dead while its router served on (no crashed instance replaced, no scaling). A check is one
    flock probe; starting one is a single flock attempt, so routers racing for it start one supervisor."""
    while True:
        try:
            if supervisor.running(home) is None:
                await asyncio.to_thread(supervisor.revive, store, home)
        except Exception as exc:  # a locked store or a failed start this round: the next check retries
            print(f"bringing the workspace supervisor back failed: {one_line(exc)}", flush=True)
        await asyncio.sleep(every)


async def serve(name: str) -> int:
    from kinetic_tui.core.artifacts import workspace_artifacts
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.backends.registry import backend_for
    from kinetic_tui.core.profiles import resolve_infra

    store = local_backend().store
    backend = backend_for(resolve_infra())
    found = serving_repo.endpoint(store, name)
    if found is None:
        print(f"endpoint {name!r} has no serving record", flush=True)
        return 1
    config = cfg.EndpointConfig.from_record(found[0])
    router = Router(store, config, cfg.read_token(name), workspace_artifacts(backend))
    runner = web.AppRunner(router.app(), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", config.port, reuse_address=True).start()
    except OSError as exc:
        print(f"port {config.port} on 127.0.0.1 cannot be used: {exc.strerror}", flush=True)
        await runner.cleanup()
        return 1
    router.read_instances()
    watcher = asyncio.create_task(router.watch())
    keeper = asyncio.create_task(keep_supervisor(store, kinetic_home()))
    serving_repo.set_router(store, name, router_record(os.getpid(), config.port))
    print(f"router of {name!r} listening on http://127.0.0.1:{config.port}", flush=True)
    await until_stopped()
    watcher.cancel()
    keeper.cancel()
    await runner.cleanup()
    router.close_links()
    print(f"router of {name!r} stopped", flush=True)
    return 0


def main() -> None:
    private_umask()
    kinetic_home()
    sys.exit(asyncio.run(serve(sys.argv[1])))


if __name__ == "__main__":
    main()
