"""The README's tour must keep working: run it as a user would, through the installed entry point."""

import subprocess
import sys
from pathlib import Path

TOUR = Path(__file__).resolve().parents[1] / "examples" / "tour.kn"


def test_the_tour_script_runs_clean_on_a_fresh_workspace(kinetic_home):
    done = subprocess.run(
        [sys.executable, "-m", "kinetic_tui", "--script", str(TOUR), "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(r["ok"] for r in records)
    by_command = {r["command"]: r["result"] for r in records}
    resumed = by_command["resume tour-model"]
    assert resumed["status"] == "Completed" and resumed["interruptions"] == 1
    assert by_command["promote tour-group 1 Production"]["stage"] == "Production"
    last_run = records[-1]["result"]
    assert last_run["branch_taken"] == {"accuracy_gate": False}
    from kinetic_tui.core.backends.local import launcher

    launcher.shutdown_server()
