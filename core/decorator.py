"""`@run`: ship a function with its code and data to a cluster, run it there, bring the result back."""

from __future__ import annotations

import functools
import inspect
import operator
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from kinetic_tui.core import cleanup_later
from kinetic_tui.core.batches import BatchHandle, map_calls
from kinetic_tui.core.debugging import require_debug_terminal
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.context import JobContext, check_callable
from kinetic_tui.core.submission.dispatch import submit_call

P = ParamSpec("P")
R = TypeVar("R")


class RemoteCallable(Generic[P, R]):
    """The decorated function: calling it runs remotely; `.run_async` and `.map` do not block.

    Generic in the function's parameters and return type, so a type checker sees `f(...)` and
    `f.run_async(...)` with `f`'s own signature. As a class attribute it binds like a method (the
    instance, or the class under `@classmethod`, travels as the first argument), and it pickles as the
    plain function: a job that receives an object whose class holds one must not need this package to
    unpickle it, and calling it there runs the body in the job instead of submitting another job.
    """

    def __init__(self, func: Callable[P, R], options: Mapping[str, Any]) -> None:
        self.func = func
        self.options = dict(options)
        functools.update_wrapper(self, func)
        JobContext.from_params(func, **self.options)  # bad settings fail at decoration, not at first call

    leading: tuple[Any, ...] = ()  # what every call passes first (a bound method's instance)

    def _context(self, **extra: Any) -> JobContext:
        """The context of one call; `extra` settings that are not None override the decorator's."""
        return JobContext.from_params(
            self.func, **{**self.options, **{k: v for k, v in extra.items() if v is not None}}
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # operator is in every interpreter: the job side needs nothing of ours to rebuild the function
        return operator.itemgetter(0), ((self.func,),)

    @overload
    def __get__(self, instance: None, owner: Any) -> RemoteCallable[P, R]: ...

    @overload
    def __get__(self, instance: object, owner: Any) -> BoundRemoteCallable[R]: ...

    def __get__(self, instance: object, owner: Any = None) -> RemoteCallable[P, R] | BoundRemoteCallable[R]:
        return self if instance is None else BoundRemoteCallable(self, instance)

    def run_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Submit and return the handle at once."""
        return submit_call(self._context(), args, kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Block, stream the job's output to this terminal, return the value or re-raise the remote error."""
        return self._call(tuple(args), dict(kwargs))

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        ctx = self._context()
        if ctx.debug:
            require_debug_terminal()  # before submitting: nobody could attach to the job
        handle = submit_call(ctx, args, kwargs)
        if not handle.debug:
            with cleanup_later.deferred():  # the value comes back first; the job's inputs go right after
                result: R = handle.result(stream_logs=True)  # unpickled from the job: what `func` returned
            return result
        with handle.debug_attach():  # prints where to attach; the job waits for the debugger
            value: R = handle.result(cleanup=False)
        return value

    def map(self, inputs: Iterable[Any], **options: Any) -> BatchHandle:
        """One job per input; returns a BatchHandle (`core.batches.map_calls` lists the options)."""
        return map_calls(self, inputs, **options)

    run_async_map = map


class BoundRemoteCallable(Generic[R]):
    """A RemoteCallable read through an instance (or a class, under `@classmethod`): every call ships
    that object as the first argument. Its parameters are open: a ParamSpec cannot drop `self`."""

    def __init__(self, remote: RemoteCallable[..., R], instance: object) -> None:
        self.remote = remote
        self.instance = instance
        self.leading = (instance,)
        functools.update_wrapper(self, remote.func)

    def _context(self, **extra: Any) -> JobContext:
        return self.remote._context(**extra)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.remote._call((self.instance, *args), kwargs)

    def run_async(self, *args: Any, **kwargs: Any) -> JobHandle:
        return self.remote.run_async(self.instance, *args, **kwargs)

    def map(self, inputs: Iterable[Any], **options: Any) -> BatchHandle:
        return map_calls(self, inputs, **options)

    run_async_map = map


def run(
    accelerator: str = "cpu",
    container_image: str | None = None,
    base_image_repo: str | None = None,
    zone: str | None = None,
    project: str | None = None,
    capture_env_vars: Iterable[str] | None = None,
    cluster: str | None = None,
    backend: str | None = None,
    namespace: str | None = None,
    volumes: Mapping[str, Any] | None = None,
    spot: bool = False,
    output_dir: str | None = None,
    debug: bool = False,
    profile: str | None = None,
) -> Callable[[Callable[P, R]], RemoteCallable[P, R]]:
    """Decorator factory: `@run(accelerator="v5e-2x2")`, Kinetic's parameters in Kinetic's order (and
    `profile=` after them). Settings are validated when decorating.

    `debug=True`: the job starts debugpy and waits for a debugger before calling the function; a blocking
    call prints where to attach (it needs a terminal), `run_async` returns at once and
    `handle.debug_attach()` says where. `base_image_repo` is where prebuilt-mode images come from
    (default: KINETIC_BASE_IMAGE_REPO, else this package's own repository)."""
    options = dict(
        accelerator=accelerator,
        container_image=container_image,
        base_image_repo=base_image_repo,
        zone=zone,
        project=project,
        cluster=cluster,
        namespace=namespace,
        backend=backend,
        capture_env_vars=capture_env_vars,
        volumes=volumes,
        spot=spot,
        output_dir=output_dir,
        debug=debug,
        profile=profile,
    )
    if debug and spot:
        warnings.warn("debug=True with spot=True: a preemption can end the debug session", stacklevel=2)

    def decorate(func: Callable[P, R]) -> RemoteCallable[P, R]:
        check_callable(func)
        return RemoteCallable(func, options)

    return decorate


def map(fn: Any, inputs: Iterable[Any], **options: Any) -> BatchHandle:
    """`kinetic.map(f, inputs)`: `f` is a `@run` function (or its `run_async`, as Kinetic's `map` takes it), or
    a plain function run with the `run` options among `options`; the rest are `map_calls`'s."""
    target = getattr(fn, "__self__", fn) if getattr(fn, "__name__", "") == "run_async" else fn
    if isinstance(target, (RemoteCallable, BoundRemoteCallable)):
        return map_calls(target, inputs, **options)
    run_options = {name: options.pop(name) for name in RUN_OPTIONS if name in options}
    return map_calls(run(**run_options)(fn), inputs, **options)


RUN_OPTIONS = tuple(inspect.signature(run).parameters)
