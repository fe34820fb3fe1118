"""What `doctor` hands back: one finding per check, and one line per repair it made."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One check's verdict: `message` says what was found, `fix` (problems only) what to do about it."""

    check: str
    ok: bool
    message: str
    fix: str = ""

    def line(self) -> str:
        verdict = "ok" if self.ok else "problem"
        return f"{verdict:<8} {self.check}: {self.message}" + (f"; {self.fix}" if self.fix else "")


@dataclass
class Report:
    home: Path
    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return all(finding.ok for finding in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "home": str(self.home),
            "clean": self.clean,
            "checks": [asdict(finding) for finding in self.findings],
            "actions": list(self.actions),
        }
