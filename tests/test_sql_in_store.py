"""All SQL lives in `core/store/`: no other module of the package holds a string literal that is an SQL
statement, so every statement (and every schema assumption) has one home, next to the migrations."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = ("kinetic_tui", "core", "infra", "runner")
STORE = ROOT / "core" / "store"
# A literal is SQL when it starts with a statement keyword (upper case, as the project writes SQL) and goes on:
# "DELETE" alone is an HTTP verb, "DELETE FROM jobs" is a statement.
SQL = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|"
    r"RELEASE|PRAGMA|WITH|WHERE)\s+\S"
)
# Modules other branches of the same restructure move into the store; each entry must still hold SQL (a
# stale entry fails), so the list only shrinks.
NOT_MOVED_YET: set[str] = set()


def sql_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal in `source` that reads as an SQL statement; an f-string
    counts by its leading text."""
    found = []
    tree = ast.parse(source)
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    for node in ast.walk(tree):
        if id(node) in parts:
            continue
        if isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            text = head.value if isinstance(head, ast.Constant) and isinstance(head.value, str) else ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if SQL.match(text):
            found.append((node.lineno, text.strip().splitlines()[0][:60]))
    return sorted(found)


def offenders() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for folder in PACKAGE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if path.is_relative_to(STORE):
                continue
            hits = sql_literals(path.read_text())
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_the_checker_finds_planted_statements() -> None:
    planted = """
def load(store, name, table):
    store.query("SELECT record FROM training_jobs WHERE name = ?", (name,))
    store.write(f"DELETE FROM {table} WHERE name = ?", (name,))
    conn.execute("BEGIN IMMEDIATE")
    where = "WHERE r.pool = ?"
"""
    assert [line for line, _ in sql_literals(planted)] == [3, 4, 5, 6]


def test_the_checker_leaves_prose_and_verbs_alone() -> None:
    harmless = '''
"""Update the pool: SELECT nothing here, this is a docstring that mentions SQL later."""
method = "DELETE"
message = f"cannot select {name}; update it first"
label = "Selected"
'''
    assert sql_literals(harmless) == []


def test_no_sql_outside_the_store() -> None:
    found = offenders()
    moved = {path: hits for path, hits in found.items() if path not in NOT_MOVED_YET}
    assert not moved, "SQL outside core/store: " + "; ".join(
        f"{path}:{line} {text!r}" for path, hits in moved.items() for line, text in hits
    )
    stale = NOT_MOVED_YET - set(found)
    assert not stale, f"no SQL left in {sorted(stale)}: remove them from NOT_MOVED_YET"
