"""`import kinetic_tui as kinetic` is the whole Python API, and it never pulls in the console (textual)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_tui
from tests.lifecycle.run_projects import stop_jobs

PUBLIC = (
    "run",
    "Data",
    "JobHandle",
    "JobStatus",
    "attach",
    "list_jobs",
    "map",
    "BatchHandle",
    "BatchError",
    "attach_batch",
)

PROBE = f"""
import json, sys
import kinetic_tui as kinetic
found = {{name: getattr(kinetic, name).__module__ for name in {PUBLIC!r}}}
print(json.dumps({{"found": found, "textual": sorted(m for m in sys.modules if m.split(".")[0] == "textual")}}))
"""


def test_public_names_resolve_without_importing_textual(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["textual"] == []
    assert set(report["found"]) == set(PUBLIC)
    assert all(module.startswith("kinetic_tui.core.") for module in report["found"].values()), report["found"]


def test_public_names_are_the_core_objects_and_listed_in_all() -> None:
    import kinetic_tui.core
    from kinetic_tui.core.batches import BatchError, BatchHandle, attach_batch
    from kinetic_tui.core.data import Data
    from kinetic_tui.core.decorator import map, run
    from kinetic_tui.core.job_status import JobStatus
    from kinetic_tui.core.jobs import JobHandle, attach, list_jobs
    from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, Step

    expected = {
        "Pipeline": Pipeline,
        "Step": Step,
        "ConditionStep": ConditionStep,
        "run": run,
        "Data": Data,
        "JobHandle": JobHandle,
        "JobStatus": JobStatus,
        "attach": attach,
        "list_jobs": list_jobs,
        "map": map,
        "BatchHandle": BatchHandle,
        "BatchError": BatchError,
        "attach_batch": attach_batch,
    }
    for name, obj in expected.items():
        assert getattr(kinetic_tui, name) is obj, name
        assert name in kinetic_tui.__all__
    assert set(kinetic_tui.__all__) == set(expected) | {"RemoteCallable", "parse_accelerator", "__version__"}


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'rnu'"):
        kinetic_tui.rnu  # noqa: B018
