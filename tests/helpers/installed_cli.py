"""The installed `kinetic-tui` executable, for tests that drive it as a shell would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def executable() -> str:
    """The console script of this environment (beside the interpreter, else on PATH)."""
    found = shutil.which("kinetic-tui", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert found, "the kinetic-tui console script is not installed"
    return found


def bash_complete(words: str, cword: int) -> list[str]:
    """The candidates bash would get for COMP_WORDS/COMP_CWORD, as `type,value` lines."""
    env = {**os.environ, "_KINETIC_TUI_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    done = subprocess.run([executable()], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()
