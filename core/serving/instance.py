"""One serving instance: the function a long-running job runs on a pool node. It holds the multi-model LRU
of its endpoint and answers the router's invocations over the router's link (`link.py`) on 127.0.0.1.

A miss loads the version (its state and predict) before the LRU records it; an eviction unloads the
evicted version, so its next use is a miss that loads again. Every load and eviction goes back to the
router with the answer, with the load's measured time, and from there into the store.

The instance says where it listens on its log (one structured line), which the controller reads through
the backend, as the training service reads a training's progress.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from kinetic_tui.core.errors import ValidationError, one_line
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving import link
from kinetic_tui.core.serving.invocation import error_json
from kinetic_tui.core.serving.model import NotServable
from kinetic_tui.core.serving.signals import until_stopped
from kinetic_tui.core.serving.version import VersionModel, load, unload
from kinetic_tui.core.training.entry import emit

SPECS_KEPT = 256  # parsed version specs an instance keeps, keyed by the router's bytes


class Instance:
    def __init__(self, max_loaded_models: int) -> None:
        self.models = MultiModelEndpoint(max_loaded_models)
        self._specs: dict[bytes, VersionModel] = {}

    def invoke(self, served: VersionModel, record: Any) -> tuple[int, bytes, list[dict[str, Any]]]:
        """(status, JSON body, cache events) of one invocation; user errors become 500 JSON, never a stack."""
        if served.name not in self.models.models or self.models.models[served.name] != served:
            self.models.register(served.name, served)
        events: list[dict[str, Any]] = []
        evicted_before = len(self.models.evict_events)
        try:
            if served.name not in self.models.loaded:
                unload(served.name)
                events.append({"kind": "load", "model": served.name, "seconds": load(served).seconds})
            output = self.models.invoke(served.name, record)
        except NotServable as exc:
            return 409, error_json("NotServable", str(exc)), events
        except Exception as exc:  # the user's predict (or its import) failed: the instance keeps serving
            return 500, error_json(type(exc).__name__, one_line(exc)), events
        finally:
            for name in self.models.evict_events[evicted_before:]:
                unload(name)
                events.append({"kind": "evict", "model": name, "seconds": 0.0})
        cache = {"loaded": self.models.loaded, "hits": self.models.hits, "misses": self.models.misses}
        try:  # the output is the only part that can fail to encode
            body = json.dumps({"model": served.name, "output": output, "cache": cache}, allow_nan=False)
            return 200, body.encode(), events
        except (TypeError, ValueError) as exc:
            message = f"predict returned a {type(output).__name__}, not a JSON value: {exc}"
            return 500, error_json("NotJSON", message), events

    def answer(self, spec: bytes, body: bytes) -> link.Answer:
        """The link's handler. The router checked the body and resolved the version before sending it."""
        served = self._specs.get(spec)
        if served is None:
            if len(self._specs) >= SPECS_KEPT:
                self._specs.clear()
            served = self._specs[spec] = VersionModel(**json.loads(spec))
        status, out, events = self.invoke(served, json.loads(body)["record"])
        noted = json.dumps(events).encode() if events else b""
        return link.Answer(status, self.models.hits, self.models.misses, noted, out)


def _token(endpoint: str) -> str | None:
    try:
        return cfg.read_token(endpoint)
    except ValidationError:  # its file is gone: no link is accepted until `endpoint start` writes one
        return None


async def _serve(instance: Instance, endpoint: str) -> None:
    listener = link.Listener(instance.answer, lambda: _token(endpoint))
    port = await listener.start()
    emit({"type": "listening", "url": link.address(port), "pid": os.getpid()})
    await until_stopped()
    await listener.stop()


def serve_instance(endpoint: str, max_loaded_models: int) -> None:
    """The job's function: serve until the job is stopped (SIGTERM). The controller stops an instance only
    once the router no longer sends it requests and none is in flight on it."""
    print(f"instance of endpoint {endpoint!r} starting (cache of {max_loaded_models})", flush=True)
    asyncio.run(_serve(Instance(max_loaded_models), endpoint))
