"""A version's predict code is extracted once per machine, shared by its instances: a second instance
loading it while the first is still extracting (or after the first was killed mid-way) must get the whole
project, never half of it (a chaos run's instances answered 500 FileNotFoundError for that)."""

from __future__ import annotations

import io
import json
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.serving import model
from kinetic_tui.core.submission.packaging.plan import PLAN_ARCNAME


class Archives:
    """The part of an artifact store a loader reads: one code archive by digest."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get_bytes(self, digest: str) -> bytes:
        return self.data


def archive() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        out.writestr("scoring.py", "def predict(state, record):\n    return {'y': state * record}\n")
        out.writestr(PLAN_ARCNAME, json.dumps({"sys_path_rel": []}))
    return buffer.getvalue()


def test_a_loader_racing_an_extraction_in_progress_gets_the_whole_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    store: Any = Archives(archive())
    real = zipfile.ZipFile.extractall
    raced: list[Any] = []
    loaders: list[str] = []

    def first_member_then_a_second_loader(self: zipfile.ZipFile, path: Any = None, *args: Any) -> None:
        loaders.append(str(path))
        if len(loaders) == 1:  # the first loader is half-way through when the second one starts
            self.extract(self.namelist()[0], path)
            raced.append(model.import_predict(store, "scoring:predict", "c0de" * 8))
        real(self, path, *args)

    monkeypatch.setattr(zipfile.ZipFile, "extractall", first_member_then_a_second_loader)
    first = model.import_predict(store, "scoring:predict", "c0de" * 8)
    assert raced[0](2, 3) == {"y": 6} and first(2, 4) == {"y": 8}
    assert [p.name for p in tmp_path.iterdir()] == [f"kinetic-predict-{'c0de' * 4}"]  # no partial left
