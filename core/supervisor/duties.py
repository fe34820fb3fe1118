"""What the workspace supervisor does: each duty is work that moves only while some process drives it.

A duty says whether it is due (cheap: a few indexed reads of the store) and does one round of its work in
`tick`. A round commits its own short transactions and never waits for the work it drives: a job runs in
its own process, so a round only looks, settles and starts. The supervisor lives while any duty is due.

Duties now: the job queue (start PENDING jobs as nodes free up) and the tuning studies (submit each next
trial as the previous ones settle). A new detached mechanism (a pipeline run's driver, an endpoint's
controller) becomes a supervisor duty by joining `DUTIES`; the endpoint controllers keep each endpoint's
router and instances running as the store wants them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kinetic_tui.core.pipelines.driver import PipelineRuns
from kinetic_tui.core.serving.controller import EndpointControllers
from kinetic_tui.core.store import Store, jobs_repo, lanes_repo

if TYPE_CHECKING:
    from kinetic_tui.core.artifacts import ArtifactStore
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.backends.local.backend import LocalBackend
    from kinetic_tui.core.training.service import TrainingService


@dataclass
class Supervised:
    """The home a supervisor serves: its store, its local backend and the profile's backend, made once."""

    home: Path
    local: LocalBackend
    profile_backend: Callable[[], Backend]

    @property
    def store(self) -> Store:
        return self.local.store

    @cached_property
    def backend(self) -> Backend:
        """The profile's backend (on a gke profile a study's trials are GKE Jobs)."""
        return self.profile_backend()

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """The artifact store in the profile's jobs bucket (what the served versions load from)."""
        from kinetic_tui.core.artifacts import workspace_artifacts

        return workspace_artifacts(self.backend)

    @cached_property
    def training(self) -> TrainingService:
        from kinetic_tui.core.training.service import TrainingService

        return TrainingService(self.store, self.backend)


class Duty(Protocol):
    name: str
    pause: float | None  # how soon its next round is wanted after this one (None: the loop's own pause)

    def due(self, home: Supervised) -> bool: ...

    def tick(self, home: Supervised) -> None: ...


class JobQueue:
    """PENDING local jobs start as their pools free nodes; settling a finished job or map lane starts the
    next. The duty stays due while a lane is open (its end must be seen with no client left), but a round
    acts only when a lane's process has ended or a job waits: a round while a lane runs would apply its
    progress every poll beside the waiting client, taking a core from the lanes."""

    name = "job queue"
    pause: float | None = None

    def due(self, home: Supervised) -> bool:
        return jobs_repo.any_queued(home.store) or lanes_repo.any_open(home.store)

    def tick(self, home: Supervised) -> None:
        if home.local.scheduling_due():
            home.local.reconcile()


class Studies:
    """A study keeps submitting its trials after the client that started it exits."""

    name = "tuning studies"
    pause: float | None = None

    def due(self, home: Supervised) -> bool:
        return bool(home.store.tuning.names()) and bool(home.training.moving_studies())

    def tick(self, home: Supervised) -> None:
        home.training.refresh()


DUTIES: tuple[Duty, ...] = (JobQueue(), Studies(), PipelineRuns(), EndpointControllers())


def due(home: Supervised) -> list[Duty]:
    return [duty for duty in DUTIES if duty.due(home)]
