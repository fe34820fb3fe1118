"""The `kinetic-tui --demo` workspace: filled by running real work through the Console."""

from kinetic_tui.core.demo.fill import DemoProgress, demo_home, fill

__all__ = ["DemoProgress", "demo_home", "fill"]
