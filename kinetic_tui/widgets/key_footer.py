"""The footer: the keys of whatever has focus, one line drawn by `render.key_hints`.

Textual's `Footer` mounts a widget per key and recomposes them all whenever the bindings change; this one
is a single widget that redraws its line on the same signal (focus moved, a view switched, a modal
opened), so it costs the first frame one widget and a few lines of stylesheet.
"""

from __future__ import annotations

from textual import events
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget

from kinetic_tui.render.key_hints import HintLine, KeyHint, key_hints


class KeyFooter(Widget, can_focus=False):
    """Shows the bindings the screen would act on now (`Screen.active_bindings`: a `check_action` that
    returns False hides a key, None dims it, and so does a `why_not(action)` of the binding's owner that
    gives a reason: the key cannot act on the selected row); the command palette's key sits at the right
    edge. A click on a hint presses its key, as on Textual's footer."""

    COMPONENT_CLASSES = {"key-footer--key"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        & > .key-footer--key { color: $footer-key-foreground; text-style: bold; }
    }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._line = HintLine([], [])  # as last drawn, for clicks

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        self.refresh()

    def hints(self) -> tuple[list[KeyHint], KeyHint | None]:
        """(the shown keys, one per action, in binding order; the palette key or None)."""
        app = self.app
        shown: list[KeyHint] = []
        actions: set[str] = set()
        active = self.screen.active_bindings
        for node, binding, enabled, _ in active.values():
            if binding.show and binding.action not in actions:
                actions.add(binding.action)
                why_not = getattr(node, "why_not", None)
                enabled = enabled and not (why_not is not None and why_not(binding.action))
                shown.append(KeyHint(app.get_key_display(binding), binding.description, enabled, binding.key))
        palette = active.get(app.COMMAND_PALETTE_BINDING) if app.ENABLE_COMMAND_PALETTE else None
        corner = (
            None
            if palette is None
            else KeyHint(
                app.get_key_display(palette.binding), palette.binding.description, palette.enabled, palette.binding.key
            )
        )
        return shown, corner

    def render_line(self, y: int) -> Strip:
        """Segments straight to a strip (Line API): Textual's content pipeline cost this one line twice."""
        shown, corner = self.hints()
        width = self.size.width
        self._line = key_hints(shown, width, corner, self.rich_style, self.get_component_rich_style("key-footer--key"))
        return Strip(self._line.segments, width)

    def on_click(self, event: events.Click) -> None:
        hint = self._line.hint_at(event.x)
        if hint is None:
            return
        if hint.enabled:
            self.app.simulate_key(hint.press)
        else:
            self.app.bell()
