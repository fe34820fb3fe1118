"""Pure renderers from core snapshots to rich Text and table rows, for the Textual screens to draw.

Nothing here imports textual or reads a clock (times are passed in), so every view's content is unit-tested
as plain text, fits 80 columns, and carries each status as a glyph as well as one of the 16 ANSI colours.
Callers import the submodule they need: the package imports none, so a CLI command that formats one cell
does not pay for the DAG and chart renderers.
"""
