"""`@run`: ship a function with its code and data to a cluster, run it there, bring the result back (SPEC 2.1)."""
from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from core.collections import BatchHandle, map_calls
from core.context import JobContext, check_callable
from core.dispatch import submit_call
from core.jobs import JobHandle

RUNNER_PREFIX = "[kinetic] "


class RemoteCallable:
    """The decorated function: calling it runs remotely; `.run_async` and `.map` do not block."""

    def __init__(self, func: Callable[..., Any], options: Mapping[str, Any]) -> None:
        self.func = func
        self.options = dict(options)
        functools.update_wrapper(self, func)
        JobContext.from_params(func, **self.options)  # bad settings fail at decoration, not at first call

    def _context(self, **extra: Any) -> JobContext:
        return JobContext.from_params(self.func, **self.options, **extra)

    def run_async(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Submit and return the handle at once."""
        return submit_call(self._context(), args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Block, stream the job's output to this terminal, return the value or re-raise the remote error."""
        handle = self.run_async(*args, **kwargs)
        stop = threading.Event()
        streamer = threading.Thread(target=_stream, args=(handle, stop), daemon=True)
        streamer.start()
        try:
            return handle.result()
        finally:
            stop.set()
            streamer.join()

    def map(self, inputs: Iterable[Any], max_concurrent: int | None = None, retries: int = 0,
            fail_fast: bool = False, dispatch: str = "auto") -> BatchHandle:
        """One job per input; returns a BatchHandle (see core.collections for argument dispatch)."""
        return map_calls(self, inputs, max_concurrent=max_concurrent, retries=retries, fail_fast=fail_fast,
                         dispatch=dispatch)


def _stream(handle: JobHandle, stop: threading.Event) -> None:
    """Echo the job's own output; the runner's progress lines only with KINETIC_VERBOSE=1."""
    verbose = os.environ.get("KINETIC_VERBOSE", "") not in ("", "0")
    for batch in handle._local().read_logs(handle.job_id, follow=True, stop=stop):
        lines = [line for line in batch if verbose or not line.startswith(RUNNER_PREFIX)]
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()


def run(accelerator: str = "cpu", *, container_image: str | None = None, zone: str | None = None,
        project: str | None = None, cluster: str | None = None, namespace: str | None = None,
        backend: str | None = None, capture_env_vars: Iterable[str] | None = None,
        volumes: Mapping[str, Any] | None = None, spot: bool = False, output_dir: str | None = None,
        profile: str | None = None) -> Callable[[Callable[..., Any]], RemoteCallable]:
    """Decorator factory: `@run(accelerator="v5e-2x2")`. Settings are validated when decorating."""
    options = dict(accelerator=accelerator, container_image=container_image, zone=zone, project=project,
                   cluster=cluster, namespace=namespace, backend=backend, capture_env_vars=capture_env_vars,
                   volumes=volumes, spot=spot, output_dir=output_dir, profile=profile)

    def decorate(func: Callable[..., Any]) -> RemoteCallable:
        return RemoteCallable(check_callable(func), options)

    return decorate
