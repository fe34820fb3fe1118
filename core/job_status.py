"""Job states shared by every backend, the store and the console."""

from __future__ import annotations

import enum

from kinetic_tui.core.errors import ValidationError


class JobStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"

    @property
    def finished(self) -> bool:
        """Settled for good: waiting longer changes nothing."""
        return self in FINISHED

    @classmethod
    def parse(cls, text: str) -> JobStatus:
        try:
            return cls(text.upper())
        except ValueError:
            raise ValidationError(f"unknown job status {text!r}; valid: {', '.join(s.value for s in cls)}") from None


FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.NOT_FOUND})
