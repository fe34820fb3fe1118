"""What `submit` knows: the functions submitted by reference in this workspace and the submissions saved
by name, read and written in short transactions of their own (never around the import or the submit).

A saved submission is a name for a MODULE:FUNC with its arguments and accelerator: `submit NAME` runs it,
and what the command gives replaces what was saved: `--accelerator` its accelerator, `--args` or `--kwargs`
(either one) the call's arguments.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kinetic_tui.core.console.snapshots import KnownFunctionSnapshot
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.store import Store, functions_repo
from kinetic_tui.core.store.functions_repo import SavedFunction


class Submission(NamedTuple):
    ref: str
    accelerator: str | None
    args: list[Any]
    kwargs: dict[str, Any]


def resolve_submission(
    store: Store, ref: str, accelerator: str | None, args: list[Any], kwargs: dict[str, Any]
) -> Submission:
    """MODULE:FUNC as given; a saved NAME as saved, with what was given here in place of the saved values."""
    if ":" in ref:
        return Submission(ref, accelerator, args, kwargs)
    found = functions_repo.saved(store, ref)
    if not found:
        names = [saved.name for saved in functions_repo.saved(store)]
        raise NotFoundError(
            f"no saved submission {ref!r}; saved: {', '.join(names) or 'none (submit MODULE:FUNC --save NAME)'}"
        )
    saved = found[0]
    given = bool(args or kwargs)  # the call's arguments come together: given ones replace both saved ones
    return Submission(
        saved.ref, accelerator or saved.accelerator, args if given else saved.args, kwargs if given else saved.kwargs
    )


def record_submission(store: Store, submission: Submission, save: str | None, now: float) -> None:
    """Note a submitted function and, with `save`, save the submission under that name."""
    with store.transaction() as conn:
        functions_repo.note_run(conn, submission.ref, now)
        if save is not None:
            functions_repo.save(conn, SavedFunction(save, *submission, now))


def known_functions(store: Store) -> tuple[KnownFunctionSnapshot, ...]:
    """The saved submissions by name, then every function submitted by reference, the latest first."""
    saved = [
        KnownFunctionSnapshot(s.name, s.ref, True, s.accelerator, s.args, s.kwargs, s.saved_at)
        for s in functions_repo.saved(store)
    ]
    submitted = [
        KnownFunctionSnapshot(ref, ref, False, None, [], {}, at) for ref, at in functions_repo.submitted(store)
    ]
    return (*saved, *submitted)
