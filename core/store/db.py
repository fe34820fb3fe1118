"""The SQLite database behind every console action: one file shared by the TUI, the CLI and clients.

Settings and why:
- WAL journal: readers never block the one writer, so the TUI can poll while the CLI commits.
- `synchronous=NORMAL`: in WAL mode this never corrupts the file and keeps every commit across an
  application crash (SIGKILL included: the WAL page is in the OS cache before COMMIT returns). Only an OS
  crash or power loss can drop the last commits, and that also kills every local job those commits
  describe, which the console reconciles on start. FULL would add an fsync per action for no gain here.
- `busy_timeout`: a writer waits for another process's transaction instead of failing at once; a lock
  held longer than the timeout becomes a `StoreError`. The timeout (30 s, `KINETIC_STORE_TIMEOUT` seconds)
  is long because a busy machine (many writers, a writer descheduled or stopped mid-transaction) must
  slow a command down, never fail it; only a process stuck holding the lock should.
- Threads: one connection per thread (`threading.local`), because a sqlite3 connection carries its own
  transaction state; sharing one behind a lock would let one thread's action commit another's writes.
  SQLite's file locking then serialises the threads exactly as it does processes.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.paths import job_data_in, state_db_path
from kinetic_tui.core.store.migrations import MIGRATIONS

DEFAULT_TIMEOUT = 30.0
TIMEOUT_ENV = "KINETIC_STORE_TIMEOUT"
LOCK_LOG = "KINETIC_LOCK_LOG"  # a file each lock wait is appended to ("PID SECONDS PATH")


class StoreError(KineticError):
    """state.db cannot be used as is (corrupt, too new, locked, or lost beside job data); the file is left
    untouched."""


def dumps(value: Any, what: str) -> str:
    """Compact JSON for a column; key order is kept (a run's steps stay in topological order), and
    `what` names the value in the error when it is not serialisable."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{what} is not JSON-serialisable: {exc}") from None


def _statements(script: str) -> Iterator[str]:
    """Split a migration script into statements (executescript would commit our open transaction)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement in migration: {pending.strip()[:60]!r}")


# (SQLite error name prefix, the words of its message, what happened, what to do) for the file system's refusals
_FILE_ERRORS = (
    (
        "SQLITE_READONLY",
        "readonly database",
        "cannot be written",
        "make it, its -wal and -shm files and {dir} writable by this user (or remount the disk read-write), then retry",
    ),
    (
        "SQLITE_FULL",
        "disk is full",
        "cannot grow: its disk is full",
        "free space on the disk holding {dir}, then retry",
    ),
    (
        "SQLITE_IOERR",
        "disk I/O error",
        "could not be read or written",
        "check the disk holding {dir} (dmesg, fsck) and retry; if it persists, restore state.db from a backup",
    ),
    (
        "SQLITE_CANTOPEN",
        "unable to open database file",
        "cannot be opened",
        "check that it is a file and that {dir} exists and is writable by this user",
    ),
)


def latest_schema_version() -> int:
    """The version every opened file is migrated to."""
    return MIGRATIONS[-1][0]


def lost_file(path: Path) -> tuple[str, Path] | None:
    """("missing" or "empty (0 bytes)", the job data found) when `path` is a lost store beside job data."""
    try:
        size: int | None = path.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError:
        return None  # unreadable or not a file: SQLite reports it with the path
    if size:
        return None
    found = job_data_in(path.parent)
    if found is None:
        return None
    return ("missing" if size is None else "empty (0 bytes)"), found


def lock_timeout() -> float:
    """KINETIC_STORE_TIMEOUT seconds when set, else DEFAULT_TIMEOUT; a value that is not a positive number
    is refused, never silently replaced."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValidationError(f"{TIMEOUT_ENV}={text!r} is invalid: give a positive number of seconds (default 30)")
    return value


class Database:
    """Owns state.db: opens, checks and migrates it, and runs each action in one transaction."""

    def __init__(
        self, path: Path | str | None = None, *, timeout: float | None = None, rebuilding: bool = False
    ) -> None:
        """`timeout`: seconds a write waits for the lock (default: the environment's, else DEFAULT_TIMEOUT).
        `rebuilding`: create the file even beside job data (a lost store), for the repair that rebuilds the
        job rows from their files right after."""
        self.path = Path(path) if path is not None else state_db_path()
        self.timeout = lock_timeout() if timeout is None else timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # seconds each recent write of this process waited for another's lock
        self.lock_waits: collections.deque[float] = collections.deque(maxlen=1000)
        self._unmarked: str | None = None  # passed the quick check as this identity; not recorded yet
        if not rebuilding:
            self._refuse_lost_file()
        self._open_checked()

    # -- connections -----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        with self._translated():
            conn = sqlite3.connect(
                self.path,
                timeout=self.timeout,  # sets busy_timeout isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
        with self._lock:
            self._connections.append(conn)
        return conn

    @property
    def connection(self) -> sqlite3.Connection:
        """This thread's connection (created on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            self._local.depth = 0
        return conn

    def close(self) -> None:
        """Close every thread's connection (each lives until here); later use opens fresh ones."""
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- opening: check before touching anything --------------------------------------------------

    def _refuse_lost_file(self) -> None:
        """A missing or empty file beside job data is a lost database, not a new workspace: opening it would
        start an empty one (SQLite creates the file) and every job, training and version would vanish while
        their directories stay on disk. Checked before SQLite touches anything."""
        lost = lost_file(self.path)
        if lost is not None:
            state, found = lost
            raise StoreError(
                f"{self.path} is {state} but this home holds job data ({found}); run `kinetic-tui doctor "
                f"--repair` to create it and rebuild the job rows from their files, or restore state.db from a "
                f"backup (nothing was changed)"
            )

    def _open_checked(self) -> None:
        """Refuse a corrupt or newer file before writing a byte to it, then migrate."""
        conn = self.connection
        try:
            with self._translated():
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                identity = self._identity()
                if not self._checked(identity):
                    problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
                    if problems != ["ok"]:
                        raise StoreError(self._corrupt_message("; ".join(problems[:3])))
                    self._unmarked = identity
                latest = latest_schema_version()
                if version > latest:
                    raise StoreError(
                        f"{self.path} has schema version {version} but this kinetic-tui only knows up to "
                        f"{latest}; upgrade kinetic-tui (the file was left untouched)"
                    )
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                self._migrate(version)
        except BaseException:
            self.close()
            raise

    # The quick check reads every page (seconds for a long history), so it runs once per version of the
    # main file: `state.db-checked` holds the identity the file had when it last passed. Whatever writes
    # the file's pages (a checkpoint, a damaged copy, another tool) changes its size or mtime, and the
    # write-ahead log's frames carry their own checksums. The marker is written after the first
    # transaction that commits, so a command that fails (a held lock) leaves the home as it was.

    def _checked(self, identity: str) -> bool:
        try:
            return self.path.with_name(self.path.name + "-checked").read_text() == identity
        except (OSError, UnicodeDecodeError):
            return False

    def _identity(self) -> str:
        st = os.stat(self.path)
        return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns}"

    def _mark_checked(self) -> None:
        identity, self._unmarked = self._unmarked, None
        marker = self.path.with_name(self.path.name + "-checked")
        with contextlib.suppress(OSError):  # a read-only place: the check simply runs again next time
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(identity or "")

    def _migrate(self, version: int) -> None:
        for target, script in MIGRATIONS:
            if target <= version:
                continue
            with self.transaction() as conn:
                # another process may have migrated while we waited for the write lock
                if conn.execute("PRAGMA user_version").fetchone()[0] >= target:
                    continue
                if callable(script):
                    script(conn)
                else:
                    for statement in _statements(script):
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {int(target)}")

    def schema_version(self) -> int:
        return int(self.connection.execute("PRAGMA user_version").fetchone()[0])

    def integrity_problems(self, limit: int = 3) -> list[str]:
        """What SQLite's full integrity check finds (every page and index, unlike the quick check on open);
        empty when the file is sound."""
        with self._translated():
            rows = self.connection.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
        found = [str(row[0]) for row in rows]
        return [] if found == ["ok"] else found

    # -- errors --------------------------------------------------------------------------------------

    def _corrupt_message(self, detail: str) -> str:
        return (
            f"{self.path} is not a usable kinetic state database ({detail}); it was left untouched: "
            f"move it aside (or restore a backup) and start again"
        )

    def _store_error(self, exc: sqlite3.DatabaseError) -> StoreError | None:
        """The one-line StoreError for SQLite's lock and corruption errors; None for anything else
        (constraint violations and SQL mistakes are bugs, not states of the file)."""
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in text or "busy" in text:
                return StoreError(
                    f"{self.path} is locked by another process for more than {self.timeout:g}s; "
                    f"finish or close the other kinetic-tui session and retry"
                )
            return self._file_error(exc)
        if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
            return None
        return StoreError(self._corrupt_message(text))

    def _file_error(self, exc: sqlite3.OperationalError) -> StoreError | None:
        """The file system refused SQLite (read-only, full, failing, unopenable): say where and what to do,
        since SQLite's own text names neither. Matched on the error name and, without one, on the text."""
        name, text = getattr(exc, "sqlite_errorname", "") or "", str(exc)
        for names, words, problem, fix in _FILE_ERRORS:
            if name.startswith(names) or words in text:
                fix = fix.format(dir=self.path.parent)
                return StoreError(f"{self.path} {problem} ({text}); {fix}")
        return None

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            error = self._store_error(exc)
            if error is None:
                raise
            raise error from exc

    # -- transactions ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One atomic action: BEGIN IMMEDIATE, commit on success, roll back on any exception.

        IMMEDIATE takes the write lock up front, so two processes never both read-then-write and
        deadlock; `write=False` (BEGIN DEFERRED) gives a consistent snapshot for multi-query loads
        without blocking writers (do not write inside one). Nested use joins the outer transaction
        through a savepoint: an inner failure that the caller catches undoes only the inner writes, and
        nothing is durable until the outer commit. (Written without helper context managers: this is
        the per-action hot path.)
        """
        conn = self.connection
        local = self._local
        if local.depth:
            savepoint = f"nested_{local.depth}"
            conn.execute(f"SAVEPOINT {savepoint}")
            local.depth += 1
            try:
                yield conn
            except BaseException:
                conn.execute(f"ROLLBACK TO {savepoint}")
                raise
            finally:
                local.depth -= 1
                conn.execute(f"RELEASE {savepoint}")
            return
        try:
            if write:
                self._begin_write(conn)
            else:
                conn.execute("BEGIN DEFERRED")
            local.depth = 1
            yield conn
            conn.execute("COMMIT")
            if self._unmarked is not None:
                self._mark_checked()
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = self._store_error(exc) if isinstance(exc, sqlite3.DatabaseError) else None
            if error is None:
                raise
            raise error from exc
        finally:
            local.depth = 0

    def _begin_write(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, first without waiting: finding the write lock held is a lock wait, counted in
        `lock_waits` (seconds each) and appended to the file KINETIC_LOCK_LOG names, so a test or an operator
        can prove that nothing waits on a long-running action."""
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        start = time.monotonic()
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            self._record_wait(time.monotonic() - start)

    def _record_wait(self, seconds: float) -> None:
        self.lock_waits.append(seconds)
        log = os.environ.get(LOCK_LOG)
        if log:
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {seconds:.6f} {self.path}\n")

    @property
    def in_transaction(self) -> bool:
        return bool(getattr(self._local, "depth", 0))

    def write(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One statement: it joins the current action as is (SQLite makes a single statement atomic, so
        no savepoint is needed) or runs as its own transaction when there is none."""
        if getattr(self._local, "depth", 0):
            self._local.conn.execute(sql, params)
            return
        with self.transaction() as conn:
            conn.execute(sql, params)

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file now, without waiting on any reader or writer
        (PASSIVE). For a process about to wait anyway: otherwise the commit that finds the log past 1,000
        pages does it (a 500-input map writes ~700), 5 to 15 ms inside whatever that commit was doing.
        Nothing to copy costs a read of the log's index; outside a transaction only."""
        if not getattr(self._local, "depth", 0):
            with self._translated():
                self.connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A read outside any action (joins the current transaction when there is one)."""
        with self._translated():
            return self.connection.execute(sql, params).fetchall()
