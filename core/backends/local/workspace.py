"""One Store and one LocalBackend per KINETIC_HOME per process, opened on first use.

Opening state.db checks and migrates it, which is too slow to repeat for every status poll. The cache is
keyed by the database path and keeps the few most recently used homes: a process that visits many homes
(a test suite, a demo beside a real workspace) closes the least recent one's connections rather than
holding three file descriptors per home forever. A closed Store reopens if it is used again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from kinetic_tui.core.backends.local.backend import LocalBackend
from kinetic_tui.core.paths import state_db_path
from kinetic_tui.core.store import Store
from kinetic_tui.core.store.pipeline_steps_repo import any_running
from kinetic_tui.core.supervisor import process as supervisor

KEEP = 4
_lock = threading.Lock()
_backends: OrderedDict[str, LocalBackend] = OrderedDict()


def local_backend() -> LocalBackend:
    path = str(state_db_path())
    with _lock:
        backend = _backends.get(path)
        if backend is None:
            backend = _backends[path] = LocalBackend(Store(path))
            while len(_backends) > KEEP:
                _, evicted = _backends.popitem(last=False)
                evicted.store.close()
            if any_running(backend.store):  # a pipeline run whose driver may be gone: any process of ours
                supervisor.ensure_running()  # that opens the home brings it back
        else:
            _backends.move_to_end(path)
        return backend


def store() -> Store:
    return local_backend().store
