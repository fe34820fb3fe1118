"""The paths that read the machine's core count (the default pool, the golden script, map lanes) run as on 1, 2
and 16 cores, so the suite passes on any machine and no golden output depends on the one it ran on."""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from kinetic_tui.core.backends.local import lanes, pools
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from tests.lifecycle.backend_projects import wait_for
from tests.test_console_support import json_lines
from tests.test_map_lanes import TIMEOUT, all_lanes_closed, tasks
from tests.test_script import EVERY_VERB, GOLDEN, _run

CORE_COUNTS = (1, 2, 16)

# The golden script's opening lines: the only ones that see the default pool before it is re-made.
POOL_LINES = 3


@pytest.fixture(params=CORE_COUNTS, ids=lambda n: f"{n}-cores")
def cores(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(pools, "host_cores", lambda: request.param)
    return int(request.param)


def test_a_fresh_home_has_one_cpu_node_per_core(cores: int) -> None:
    (pool,) = local_backend().pools()
    assert (pool.name, pool.accelerator, pool.nodes) == ("cpu", "cpu", cores)


def test_the_golden_script_differs_only_in_the_removed_default_pool(cores: int) -> None:
    script = "\n".join(EVERY_VERB.splitlines()[: POOL_LINES + 1])  # its comment line first: same line numbers
    _, out, _ = _run(script, output="json", keep_going=True)
    expected = [json.loads(line) for line in GOLDEN.read_text().splitlines()[:POOL_LINES]]
    expected[0]["result"]["nodes"] = cores
    assert json_lines(out) == expected


def test_a_map_on_the_default_pool_uses_at_most_its_nodes_and_runs_every_input(cores: int, tasks: ModuleType) -> None:
    batch = tasks.shout.map(range(6))
    handles = batch.handles()
    assert batch.results(timeout=TIMEOUT) == [h.job_id for h in handles]
    backend = local_backend()
    assert all(backend.job(h.job_id).status is JobStatus.SUCCEEDED for h in handles)
    wait_for(all_lanes_closed, TIMEOUT, "every lane to close")
    spans = backend.store.query("SELECT started_at, ended_at FROM lanes")
    overlapping = max(sum(start <= at < end for start, end in spans) for at, _ in spans)
    assert 1 <= overlapping <= min(cores, 6)  # a lane holds a node: never more open at once than the pool has
    assert backend.pool("cpu").in_use == 0 and not lanes.active(backend.store)
