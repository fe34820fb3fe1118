"""The headless core of kinetic-tui (`kinetic_tui.core`): it never imports textual.

The public Python API is built here and re-exported, lazily, by `kinetic_tui`.
"""
