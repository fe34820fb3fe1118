"""Kinetic's CLI commands and flags, run here: each flag has its effect (or says plainly it has none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetic_tui.cli import gke as cli_gke
from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.profiles import current_profile_name, show_profile
from tests.test_cli_gke import CLUSTER, PROJECT, FakeStack


def cli(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def out(*args: str) -> object:
    result = cli(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    launcher.shutdown_server()


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "kj.py").write_text(
        "def hello(n):\n    for i in range(3):\n        print('line', i)\n    return n * 2\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def finished_job() -> str:
    return str(out("submit", "kj:hello", "--args", "[21]", "--wait", "--json")["result"]["job_id"])  # type: ignore[index]


def uploads(home: Path, job: str) -> set[str]:
    return {p.name for p in home.glob(f"local/buckets/*/{job}/*")}


def workdir(home: Path, job: str) -> bool:
    return (home / "local" / "jobs" / job / "work").exists()


@pytest.fixture
def gke(monkeypatch: pytest.MonkeyPatch) -> FakeStack:
    stack = FakeStack()
    monkeypatch.setattr(cli_gke, "stack_backend", lambda: stack)
    created = cli("profile", "create", "prod", "--backend", "gke", "--project", PROJECT, "--cluster", CLUSTER, "--use")
    assert created.exit_code == 0, created.output
    return stack


# -- the real executable -------------------------------------------------------------------------------------


def _real(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("kinetic-tui")
    env = {**os.environ, "KINETIC_HOME": str(home)}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=60)


def test_version_and_a_bad_override_through_the_real_executable(kinetic_home: Path) -> None:
    version = _real("--version", home=kinetic_home)
    assert version.returncode == 0 and version.stdout.startswith("kinetic-tui ")
    bad = _real("jobs", "list", "--project", "Bad_Project", home=kinetic_home)
    assert bad.returncode == 2 and "'--project'" in bad.stderr and "lowercase letters" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_logs_short_flags_through_the_real_executable(kinetic_home: Path, job_dir: Path) -> None:
    job = finished_job()
    whole = _real("jobs", "logs", job, home=kinetic_home).stdout.splitlines()
    assert len(whole) > 3 and any("line 0" in line for line in whole)
    tail = _real("jobs", "logs", job, "-n", "2", home=kinetic_home)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines() == whole[-2:]
    assert _real("jobs", "logs", job, "-n3", home=kinetic_home).stdout.splitlines() == whole[-3:]
    follow = _real("jobs", "logs", job, "-f", home=kinetic_home)
    assert follow.returncode == 0 and follow.stdout.splitlines() == whole


# -- overrides -----------------------------------------------------------------------------------------------


def test_cluster_override_selects_another_clusters_pools(gke: FakeStack) -> None:
    cli("pool", "add", "a", "--accelerator", "l4", "--nodes", "2", "--cluster", "other", "--no-apply")
    other = out("pool", "list", "--cluster", "other", "--json")
    assert [row["name"] for row in other] == ["a"]  # type: ignore[union-attr, index]
    assert out("pool", "list", "--json") == []  # the profile's own cluster is untouched
    assert out("pool", "list", "--project", "elsewhere", "--cluster", "other", "--json") == []


def test_overrides_on_a_local_profile_say_what_they_do(kinetic_home: Path) -> None:
    listed = cli("jobs", "list", "--namespace", "team", "--zone", "europe-west4-a")
    assert listed.exit_code == 0 and "note: --namespace, --zone: these choose a GKE target" in listed.stderr
    assert "note" not in cli("jobs", "list").stderr  # nothing given, nothing said; nothing lingers either


# -- jobs ----------------------------------------------------------------------------------------------------


def test_result_cleans_up_unless_no_cleanup(kinetic_home: Path, job_dir: Path) -> None:
    job = finished_job()
    kept = out("jobs", "result", job, "--no-cleanup", "--timeout", "30", "--json")
    assert kept["result"]["value"] == 42 and "payload.pkl" in uploads(kinetic_home, job)  # type: ignore[index]
    assert out("jobs", "result", job, "--json")["result"]["value"] == 42  # type: ignore[index]
    assert "payload.pkl" not in uploads(kinetic_home, job) and not workdir(kinetic_home, job)
    assert "result.pkl" in uploads(kinetic_home, job)


def test_result_timeout_waits_and_a_bad_one_is_refused(kinetic_home: Path, job_dir: Path) -> None:
    gate = job_dir.parent / f"{job_dir.name}-gate"  # outside the project: the job's code never includes it
    (job_dir / "kslow.py").write_text(
        f"import pathlib, time\ndef slow():\n    deadline = time.monotonic() + 60\n"
        f"    while not pathlib.Path({str(gate)!r}).exists() and time.monotonic() < deadline:\n"
        f"        time.sleep(0.01)\n    return 7\n"
    )
    job = out("submit", "kslow:slow", "--detach", "--json")["result"]["job_id"]  # type: ignore[index]
    assert cli("jobs", "result", job, "--no-cleanup").exit_code == 1  # not finished: answered at once
    gate.write_text("")
    assert out("jobs", "result", job, "--timeout", "60", "--json")["result"]["value"] == 7  # type: ignore[index]
    bad = cli("jobs", "result", job, "--timeout", "soon")
    assert bad.exit_code == 2 and "--timeout" in bad.output and "seconds" in bad.output


def test_cleanup_k8s_and_gcs_choose_what_goes(kinetic_home: Path, job_dir: Path) -> None:
    job = finished_job()
    only_uploads = cli("jobs", "cleanup", job, "--no-k8s", "--cleanup-timeout", "5", "--cleanup-poll-interval", "1")
    assert only_uploads.exit_code == 0 and "uploaded inputs" in only_uploads.output
    assert workdir(kinetic_home, job) and "payload.pkl" not in uploads(kinetic_home, job)
    assert cli("jobs", "cleanup", job, "--no-gcs").exit_code == 0
    assert not workdir(kinetic_home, job)
    zero = cli("jobs", "cleanup", job, "--cleanup-poll-interval", "0")
    assert zero.exit_code == 2 and "--cleanup-poll-interval" in zero.output


def test_cleanup_waits_for_the_workload_up_to_its_timeout(kinetic_home: Path, job_dir: Path) -> None:
    job = finished_job()
    work = kinetic_home / "local" / "jobs" / job / "work"
    if subprocess.run(["chattr", "+i", str(work)], capture_output=True).returncode:
        pytest.skip("no immutable flag on this file system (chattr +i failed)")
    try:  # an immutable directory can be neither renamed nor emptied, even by root
        stuck = cli("jobs", "cleanup", job, "--cleanup-timeout", "0.3", "--cleanup-poll-interval", "0.05")
        assert stuck.exit_code == 1 and f"working directory {work} still there 0.3 s later" in stuck.output
        assert len(stuck.output.strip().splitlines()) == 1
    finally:
        subprocess.run(["chattr", "-i", str(work)], check=True)
    assert cli("jobs", "cleanup", job, "--cleanup-poll-interval", "0.05").exit_code == 0 and not workdir(
        kinetic_home, job
    )


def test_cancel_waits_until_the_jobs_processes_are_gone(kinetic_home: Path, job_dir: Path) -> None:
    (job_dir / "khold.py").write_text("import time\ndef hold():\n    time.sleep(60)\n")
    job = out("submit", "khold:hold", "--detach", "--json")["result"]["job_id"]  # type: ignore[index]
    backend, deadline = local_backend(), time.monotonic() + 30
    while backend.refresh(job).hosts is None:  # until its processes are recorded
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.02)
    hosts = backend.job(job).hosts or ()
    cancelled = cli("jobs", "cancel", job, "--cleanup-timeout", "30", "--cleanup-poll-interval", "0.05")
    assert cancelled.exit_code == 0, cancelled.output
    assert hosts and not any(host.is_alive() for host in hosts)


def test_cancel_takes_the_timing_options(kinetic_home: Path, job_dir: Path) -> None:
    job = finished_job()
    cancelled = cli("jobs", "cancel", job, "--cleanup-timeout", "1", "--project", "p", "--json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout)["result"]["status"] == "SUCCEEDED"  # a finished job stays as it is


# -- pools ---------------------------------------------------------------------------------------------------


def pool_names() -> list[str]:
    return [p["name"] for p in out("pool", "list", "--json")["result"]]  # type: ignore[index]


def test_pool_add_names_the_pool_as_kinetic_and_preview_changes_nothing(kinetic_home: Path) -> None:
    before = pool_names()
    preview = cli("pool", "add", "--accelerator", "l4", "--preview")
    assert preview.exit_code == 0 and "nothing changed" in preview.output
    assert pool_names() == before
    added = out("pool", "add", "--accelerator", "l4", "-y", "--min-nodes", "1", "--json")
    name = added["result"]["name"]  # type: ignore[index]
    assert name.startswith("gpu-l4-") and len(name) == len("gpu-l4-") + 4
    removal = cli("pool", "remove", name, "--preview")
    assert removal.exit_code == 0 and f"would remove pool {name}" in removal.output
    assert pool_names() == sorted([*before, name])
    assert cli("pool", "remove", "nope", "--preview").exit_code == 1
    assert cli("pool", "remove", name, "-y").exit_code == 0
    assert pool_names() == before


def test_gke_pool_add_records_min_nodes_reservation_and_kinetic_sizes(gke: FakeStack) -> None:
    added = cli("pool", "add", "--accelerator", "l4", "--min-nodes", "2", "--reservation", "res-1", "--no-apply")
    assert added.exit_code == 0, added.output
    (row,) = out("pool", "list", "--json")  # type: ignore[misc]
    assert row["name"].startswith("gpu-l4-") and (row["min_nodes"], row["max_nodes"]) == (2, 12)
    assert row["reservation"] == "res-1"
    refused = cli("pool", "add", "--accelerator", "t4", "--spot", "--reservation", "res-1")
    assert refused.exit_code == 2 and "reservation" in refused.output
    preview = cli("pool", "add", "--accelerator", "v5litepod-2x2", "--preview")
    assert preview.exit_code == 0 and "would add node pool tpu-v5litepod-" in preview.output
    assert gke.calls.count("up") == 0 and len(out("pool", "list", "--json")) == 1  # type: ignore[arg-type]


def test_gke_up_accelerator_preview_and_profile_name(gke: FakeStack) -> None:
    preview = cli("up", "--accelerator", "l4x2", "--min-nodes", "1", "--preview", "-y")
    assert preview.exit_code == 0 and "nothing changed" in preview.output and "gpu-l4-" in preview.output
    assert gke.calls.count("up") == 0 and out("pool", "list", "--json") == []
    applied = cli("up", "--accelerator", "l4x2", "-y", "--profile-name", "prod2")
    assert applied.exit_code == 0, applied.output
    assert gke.calls.count("up") == 1 and current_profile_name() == "prod2"
    assert [row["accelerator"] for row in out("pool", "list", "--json")] == ["l4x2"]  # type: ignore[union-attr, index]
    refused = cli("up", "--no-force-destroy", "-y")
    assert refused.exit_code == 2 and "--no-force-destroy" in refused.output


def test_local_up_accelerator_adds_one_pool(kinetic_home: Path) -> None:
    before = pool_names()
    assert cli("up", "--accelerator", "l4x1", "--preview").exit_code == 0
    assert pool_names() == before
    cli("up", "--accelerator", "l4x1")
    cli("up", "--accelerator", "l4")  # a pool of it exists: nothing more
    added = [p for p in out("pool", "list", "--json")["result"] if p["name"] not in before]  # type: ignore[index]
    assert [p["accelerator"] for p in added] == ["l4x1"] and added[0]["name"].startswith("gpu-l4-")


def test_accelerators_live_marks_what_the_cluster_has(kinetic_home: Path) -> None:
    cli("pool", "add", "g", "--accelerator", "l4x2:spot", "--nodes", "1")
    rows = out("accelerators", "--live", "--json")
    live = {r["accelerator"] for r in rows if r["provisioned"]}  # type: ignore[union-attr, index]
    assert "l4x2" in live and "l4x1" not in live and "h100x1" not in live
    assert "provisioned" not in out("accelerators", "--json")[0]  # type: ignore[index]


# -- workspace and profiles ----------------------------------------------------------------------------------


def test_config_alone_shows_the_config(kinetic_home: Path) -> None:
    alone, show = cli("config"), cli("config", "show")
    assert alone.exit_code == 0 and alone.output == show.output and "namespace" in alone.output


def test_init_with_a_project_saves_and_uses_a_gke_profile(kinetic_home: Path, gke: FakeStack) -> None:
    cli("profile", "use", "local")
    result = cli("init", "--project", "acme-ml", "--cluster", "blue", "--namespace", "team", "-y")
    assert result.exit_code == 0, result.output
    saved = show_profile("blue")
    assert (saved.backend, saved.project, saved.cluster, saved.namespace) == ("gke", "acme-ml", "blue", "team")
    assert current_profile_name() == "blue" and "`kinetic-tui up` will apply" in result.output


def test_profile_create_force_and_optional_name_and_rm_yes(kinetic_home: Path) -> None:
    assert cli("profile", "create", "dev", "--zone", "us-east1-b").exit_code == 0
    again = cli("profile", "create", "dev", "--zone", "europe-west4-a")
    assert again.exit_code == 1 and "already exists" in again.output
    assert show_profile("dev").zone == "us-east1-b"
    assert cli("profile", "create", "dev", "--zone", "europe-west4-a", "--force").exit_code == 0
    assert show_profile("dev").zone == "europe-west4-a"
    prompted = cli("profile", "create", input="asked\n")
    assert prompted.exit_code == 0 and show_profile("asked").name == "asked"
    assert cli("profile", "rm", "asked", "-y").exit_code == 0
    current = cli("profile", "rm", "dev", "--yes")  # the first profile became current, as Kinetic makes it
    assert current.exit_code == 1 and "is the current profile" in current.output
    assert cli("profile", "unset").exit_code == 0
    assert cli("profile", "rm", "dev", "--yes").exit_code == 0


def test_yes_short_flag_on_down(kinetic_home: Path, job_dir: Path) -> None:
    out("submit", "kj:hello", "--args", "[1]", "--detach", "--json")
    down = cli("down", "-y")
    assert down.exit_code == 0 and "local cluster down" in down.output


def test_build_image_refuses_a_bad_category_in_one_line(gke: FakeStack) -> None:
    bad = cli("build-image", "--category", "npu", "-y")
    assert bad.exit_code == 2 and "'cpu', 'gpu', 'tpu'" in bad.output
