"""The CLI under arbitrary argument lists: each draw is a real command followed by any mix of real flags,
choice values, names, ids, numbers, JSON and random text. Whatever the words, only documented errors come
out: an exit code of 0, 1 or 2, no Python traceback, and a refused command leaves state.db as it was.

Commands that start work (submit, train, tune, load, pipeline runs and resumes) are left out: their arguments are
fuzzed through the same verb table by the command-language tests, and a run here would start processes.
`KINETIC_CLI_FUZZ_EXAMPLES=N` runs N examples instead of the quick suite's number.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import click
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kinetic_tui.cli.main import main

STARTS_WORK = {
    "submit",
    "train",
    "resume",
    "tune",
    "load",
    "pipeline run",
    "pipeline resume",
    "rerun",
    "doctor",
    "endpoint create",
    "endpoint start",
}
EXAMPLES = int(os.environ.get("KINETIC_CLI_FUZZ_EXAMPLES") or 150)


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    found: dict[tuple[str, ...], click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.update(_commands(command, (*path, name)))
        elif " ".join((*path, name)) not in STARTS_WORK:
            found[(*path, name)] = command
    return found


COMMANDS = _commands(main)
FLAGS = sorted({opt for c in COMMANDS.values() for p in c.params if isinstance(p, click.Option) for opt in p.opts})
CHOICES = sorted(
    {str(v) for c in COMMANDS.values() for p in c.params if isinstance(p.type, click.Choice) for v in p.type.choices}
)
NAMES = ["cpu", "local", "fraud", "default", "v5litepod-2x2", "l4x2", "Production", "Staging", "-", "--", "--help"]
IDS = ["job-0123abcd", "group-0123abcd", "*", "job-[0-9a-f]*", "../../../../x", "job-", "", " ", "job-0123ABCD"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
word = st.one_of(
    st.sampled_from(FLAGS),
    st.sampled_from(CHOICES),
    st.sampled_from(NAMES + IDS),
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.floats().map(repr),
    json_values.map(lambda v: json.dumps(v, allow_nan=True)),
    st.text(max_size=12),
)
argv = st.tuples(st.sampled_from(sorted(COMMANDS)), st.lists(word, max_size=6)).map(lambda t: [*t[0], *t[1]])


def _content(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


@settings(max_examples=EXAMPLES)
@given(args=argv)
@example(args=["jobs", "list", "--project"])  # the CLI's own option without its value: was a KeyError
def test_only_documented_errors_escape_the_cli(args: list[str]) -> None:
    home = Path(os.environ["KINETIC_HOME"])
    db = home / "state.db"
    if not db.exists():  # a fresh home gets its state.db at first use, refused or not: what must not change is in it
        assert CliRunner().invoke(main, ["pools"]).exit_code == 0
    before = _content(db)
    result = CliRunner().invoke(main, args, input="")
    shown = f"{args!r} -> {result.exit_code}: {result.output[-400:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (shown, result.exc_info)
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback" not in result.output, shown
    if result.exit_code != 0:
        assert _content(db) == before, shown
