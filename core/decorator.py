"""`@run`: ship a function with its code and data to a cluster, run it there, bring the result back."""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar

from kinetic_tui.core.batches import BatchHandle, map_calls
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.context import JobContext, check_callable
from kinetic_tui.core.submission.dispatch import submit_call

# the runner's own progress lines, bare or with the `[host N] ` prefix a multi-host slice's log gives them
RUNNER_LINE = re.compile(r"(?:\[host \d+\] )?\[kinetic\] ")

P = ParamSpec("P")
R = TypeVar("R")


class RemoteCallable(Generic[P, R]):
    """The decorated function: calling it runs remotely; `.run_async` and `.map` do not block.

    Generic in the function's parameters and return type, so a type checker sees `f(...)` and
    `f.run_async(...)` with `f`'s own signature.
    """

    def __init__(self, func: Callable[P, R], options: Mapping[str, Any]) -> None:
        self.func = func
        self.options = dict(options)
        functools.update_wrapper(self, func)
        JobContext.from_params(func, **self.options)  # bad settings fail at decoration, not at first call

    def _context(self, **extra: Any) -> JobContext:
        return JobContext.from_params(self.func, **self.options, **extra)

    def run_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Submit and return the handle at once."""
        return submit_call(self._context(), args, kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Block, stream the job's output to this terminal, return the value or re-raise the remote error."""
        handle = self.run_async(*args, **kwargs)
        echo = _LogEcho(handle)
        try:
            handle.wait(on_poll=echo.pump)
        finally:
            echo.pump(final=True)
        value: R = handle.result()  # unpickled from the job: what `func` returned
        return value

    def map(
        self,
        inputs: Iterable[Any],
        max_concurrent: int | None = None,
        retries: int = 0,
        fail_fast: bool = False,
        dispatch: str = "auto",
    ) -> BatchHandle:
        """One job per input; returns a BatchHandle (see core.batches for argument dispatch)."""
        return map_calls(
            self, inputs, max_concurrent=max_concurrent, retries=retries, fail_fast=fail_fast, dispatch=dispatch
        )


class _LogEcho:
    """Echo the job's own output while waiting; the runner's progress lines only with KINETIC_VERBOSE=1.
    Runs in the waiting thread, between polls, so it adds no thread start or join to the round trip."""

    def __init__(self, handle: JobHandle) -> None:
        self.reader = handle.runs_on().log_reader(handle.job_id)
        self.verbose = os.environ.get("KINETIC_VERBOSE", "") not in ("", "0")

    def pump(self, final: bool = False) -> None:
        batch = self.reader.read() + (self.reader.rest() if final else [])
        lines = [line for line in batch if self.verbose or not RUNNER_LINE.match(line)]
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
            sys.stdout.flush()


def run(
    accelerator: str = "cpu",
    *,
    container_image: str | None = None,
    zone: str | None = None,
    project: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    backend: str | None = None,
    capture_env_vars: Iterable[str] | None = None,
    volumes: Mapping[str, Any] | None = None,
    spot: bool = False,
    output_dir: str | None = None,
    profile: str | None = None,
) -> Callable[[Callable[P, R]], RemoteCallable[P, R]]:
    """Decorator factory: `@run(accelerator="v5e-2x2")`. Settings are validated when decorating."""
    options = dict(
        accelerator=accelerator,
        container_image=container_image,
        zone=zone,
        project=project,
        cluster=cluster,
        namespace=namespace,
        backend=backend,
        capture_env_vars=capture_env_vars,
        volumes=volumes,
        spot=spot,
        output_dir=output_dir,
        profile=profile,
    )

    def decorate(func: Callable[P, R]) -> RemoteCallable[P, R]:
        check_callable(func)
        return RemoteCallable(func, options)

    return decorate


def map(
    fn: Any,
    inputs: Iterable[Any],
    max_concurrent: int | None = None,
    retries: int = 0,
    fail_fast: bool = False,
    dispatch: str = "auto",
    **run_options: Any,
) -> BatchHandle:
    """`kinetic.map(f, inputs)`: `f` is a `@run` function, or a plain one run with `run_options`."""
    remote = fn if isinstance(fn, RemoteCallable) else run(**run_options)(fn)
    return map_calls(
        remote, inputs, max_concurrent=max_concurrent, retries=retries, fail_fast=fail_fast, dispatch=dispatch
    )
