"""What the views and the job screen need of the app, as a Protocol.

Textual types `Widget.app` as `App[Any]`; `console_host(app)` gives the members of `KineticApp` that views
and screens call, typed, without their modules importing `kinetic_tui.app` (which imports them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from textual.app import App
from textual.worker import Worker

if TYPE_CHECKING:
    from kinetic_tui.core.console import Console


class ConsoleHost(Protocol):
    """The app as its views and screens see it: read-only members and the calls they make."""

    @property
    def service(self) -> Console:
        """The kinetic `Console` (`App.console` is Textual's rich console)."""

    @property
    def readonly(self) -> bool: ...
    @property
    def now(self) -> Callable[[], float]:
        """The app's clock, so ages on screen follow the clock the app was given."""

    @property
    def pool_history(self) -> Mapping[str, Sequence[int]]:
        """The last in-use samples per pool, oldest first."""

    def run_command(self, line: str) -> Worker[Any]: ...
    def open_job(self, job_id: str) -> None: ...
    def report_failure(self, worker: Worker[Any]) -> None: ...


def console_host(app: App[Any]) -> ConsoleHost:
    """`app` as a `ConsoleHost`. The cast holds because only `KineticApp` mounts the views and pushes the
    job screen (`KineticApp.views`, `KineticApp.open_job`), and it implements the Protocol."""
    return cast(ConsoleHost, app)
