"""Where the workspace lives on disk: one home directory, private to the user."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from kinetic_tui.core.errors import KineticError

# The folder that holds core/, runner/ and infra/: the checkout root in a source tree, the installed
# `kinetic_tui` package otherwise. The runner is shipped and started as a file found from here.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
RUNNER_FILE = PACKAGE_DIR / "runner" / "remote_runner.py"

T = TypeVar("T")


class HomeError(KineticError):
    """KINETIC_HOME cannot be used as a home (a file, a directory this user cannot create or change)."""


class _HomeScope:
    """The home a console works on, for the calls it runs. A context variable rather than the environment,
    so two consoles on different homes in one process (each call in its own thread or task) never see
    each other's: asyncio tasks and `asyncio.to_thread` carry it, plain threads start without it.

    It pickles as a fresh, unset scope: a job whose code is pickled by value (a project that contains this
    package) carries this module's globals, and a ContextVar cannot be pickled. The job reads its home
    from KINETIC_HOME, which its environment always has."""

    def __init__(self) -> None:
        self.var: ContextVar[Path | None] = ContextVar("kinetic_home", default=None)

    def __reduce__(self) -> tuple[type[_HomeScope], tuple[()]]:
        return _HomeScope, ()


_scope = _HomeScope()
_private_homes: set[Path] = set()  # homes this process has made owner-only


def call_on_home(home: Path, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` with `kinetic_home()` resolving to `home`: the cheap form of `using_home` for a console's
    every blocking call (a generator-based context manager costs several times more)."""
    token = _scope.var.set(home)
    try:
        return call(*args)
    finally:
        _scope.var.reset(token)


@contextmanager
def using_home(home: str | Path) -> Iterator[Path]:
    """Within the block (and the tasks and `to_thread` calls it starts), `kinetic_home()` is `home`."""
    path = Path(home).expanduser()
    token = _scope.var.set(path)
    try:
        yield path
    finally:
        _scope.var.reset(token)


@contextmanager
def as_found(home: Path) -> Iterator[Path]:
    """`using_home` for a caller that inspects the home without changing it (`doctor`): within the block a home
    open to others is not tightened, so what is found is reported as it was."""
    added = home not in _private_homes
    _private_homes.add(home)
    try:
        with using_home(home) as path:
            yield path
    finally:
        if added:
            _private_homes.discard(home)


def home_path() -> Path:
    """Where the home is (`using_home`'s, else `KINETIC_HOME`, default `~/.kinetic`), without creating it."""
    return _scope.var.get() or Path(os.environ.get("KINETIC_HOME") or Path.home() / ".kinetic").expanduser()


def kinetic_home() -> Path:
    """The home `using_home` set, else `KINETIC_HOME` (default `~/.kinetic`), owner-only (see `make_private`)."""
    home = home_path()
    if home not in _private_homes or not home.exists():
        make_private(home)
    return home


def private_umask() -> None:
    """Add 0o077 to this process's umask (files 0600, directories 0700). Only our own processes call it (the
    command line and console, the fork server, the reaper, the supervisor): a library client's process
    belongs to the user, whose later files must not change mode because they imported us."""
    os.umask(os.umask(0o077) | 0o077)


def make_private(home: Path) -> None:
    """Keep the home owner-only: it holds captured secret values, the job logs and results. A new home is
    made 0700; one that already exists open to group or others (one the user created first) is tightened to
    0700, once, with a one-line notice on stderr. Its existing contents are not walked: the home's own mode
    hides them. A path that cannot be a home (a file, an unwritable place) is a HomeError naming it, with
    nothing changed."""
    try:
        if not home.exists():
            home.mkdir(parents=True, mode=0o700)
            home.chmod(0o700)  # mkdir's mode is filtered by the umask
        elif not home.is_dir():
            raise HomeError(f"KINETIC_HOME {home} is not a directory; point KINETIC_HOME at a directory")
        else:
            mode = stat.S_IMODE(home.stat().st_mode)
            if mode & 0o077:
                home.chmod(mode & 0o700)
                print(
                    f"kinetic-tui: {home} was readable by others (mode {mode:04o}); tightened to {mode & 0o700:04o}",
                    file=sys.stderr,
                )
    except OSError as exc:
        raise HomeError(
            f"KINETIC_HOME {home} cannot be used ({exc.strerror or exc}); point KINETIC_HOME at a directory this "
            f"user can write"
        ) from None
    _private_homes.add(home)


def state_db_path() -> Path:
    return kinetic_home() / "state.db"


def job_data_in(home: Path) -> Path | None:
    """The first sign that `home` has run jobs (a job's working directory or its `handle.json`), or None for
    a home that never ran anything: a store that is missing beside such data was lost, not never made."""
    local = home / "local"
    for pattern in ("jobs/job-*", "buckets/*/job-*/handle.json"):
        found = next(local.glob(pattern), None)
        if found is not None:
            return found
    return None


_made_roots: set[Path] = set()


def local_root() -> Path:
    """Root of the local backend: buckets and per-job working directories (made once per process: a job's
    round trip asks for it several times)."""
    path = kinetic_home() / "local"
    if path not in _made_roots:
        path.mkdir(exist_ok=True)
        _made_roots.add(path)
    return path
