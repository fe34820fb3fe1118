"""The workspace supervisor process of one home (`python -m kinetic_tui.core.supervisor`, see process.py)."""

from __future__ import annotations

import logging
import os
import time

from kinetic_tui.core.paths import kinetic_home, private_umask
from kinetic_tui.core.supervisor.lease import AT_ONCE_ENV, Lease

START_DELAY = 0.5


def main() -> None:
    lease = Lease.inherited()  # taken before the pause: a `stop` meanwhile finds this process
    private_umask()
    # The submitter usually keeps scheduling while it waits on its jobs; the supervisor matters once nobody
    # looks, so it starts its work (importing the store and the backend, ~0.1 s of CPU) after this pause
    # rather than competing with the jobs it was started for.
    if not os.environ.pop(AT_ONCE_ENV, ""):
        time.sleep(START_DELAY)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s: %(message)s")
    from kinetic_tui.core.backends.local.workspace import local_backend
    from kinetic_tui.core.backends.registry import backend_for
    from kinetic_tui.core.profiles import resolve_infra
    from kinetic_tui.core.supervisor import duties, loop, process

    process.SERVING = True

    home = duties.Supervised(kinetic_home(), local_backend(), lambda: backend_for(resolve_infra()))
    loop.serve(home, lease=lease, linger=loop.linger_from_env())
    # Done once the loop returns: a client library's worker threads (the Kubernetes client's pool) must not
    # keep alive a process that no longer holds the lease, where `down` and `doctor` could no longer see it.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    main()
