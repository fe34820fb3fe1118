"""Reusable console widgets: tables, the log view, the command bar, the key footer, charts."""
