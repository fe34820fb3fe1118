"""The console's main screen: header, views, footer, with the first resume's restyle skipped."""

from __future__ import annotations

from textual import events
from textual.screen import Screen


class MainScreen(Screen[None]):
    """The console's screen: header, views, footer. It leaves the focus to the app, which hands it to the
    current view once the first frame is on screen (`KineticApp.on_ready`): focusing restyles the focused
    table and redraws the key hints, ~6% of the first paint, for a frame whose tables are still empty."""

    AUTO_FOCUS = ""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._resumed_before = False

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Textual restyles every widget of a screen when it resumes, in case the CSS changed while it
        was covered. The first resume follows the screen's mount, whose widgets were each styled as they
        mounted, after every stylesheet that can match them was loaded (a widget's own CSS loads before
        it and its children are styled): restyling them again was ~8% of the first frame's time. A later
        resume (a modal or the job screen closed, the theme changed meanwhile) restyles as usual; an
        override this Textual handler stops being called by just loses the saving."""
        if not self._resumed_before:
            self._resumed_before = True
            event.refresh_styles = False
        super()._on_screen_resume(event)
