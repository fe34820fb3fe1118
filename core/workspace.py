"""One Store and one LocalBackend per KINETIC_HOME per process, opened on first use.

Opening state.db checks and migrates it, which is too slow to repeat for every status poll; tests that
switch KINETIC_HOME get a fresh pair because the cache is keyed by the database path.
"""
from __future__ import annotations

import threading

from core.backends.local import LocalBackend
from core.paths import state_db_path
from core.store import Store

_lock = threading.Lock()
_backends: dict[str, LocalBackend] = {}


def local_backend() -> LocalBackend:
    path = str(state_db_path())
    with _lock:
        backend = _backends.get(path)
        if backend is None:
            backend = _backends[path] = LocalBackend(Store(path))
        return backend


def store() -> Store:
    return local_backend().store
