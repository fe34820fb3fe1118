"""A read command's path imports only what it reads with: `jobs list` never loads textual (the TUI) or the
kubernetes client (a gke backend), whatever the serving and pipeline services would pull in."""

import subprocess
import sys
from pathlib import Path

CODE = (
    "import sys\n"
    "from kinetic_tui.cli.main import main\n"
    "main(['jobs', 'list'], standalone_mode=False)\n"
    "heavy = ('textual', 'kubernetes')\n"
    "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
)


def test_jobs_list_imports_neither_textual_nor_kubernetes(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CODE], cwd=tmp_path, capture_output=True, text=True, check=True)
    table, loaded, _ = done.stdout.split("\n")
    assert table == "(none)"
    assert loaded == "", f"`jobs list` imported: {loaded}"
