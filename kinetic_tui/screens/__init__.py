"""The console's views (SPEC 5): one module per view, each a `View` mounted by `kinetic_tui.app`."""
