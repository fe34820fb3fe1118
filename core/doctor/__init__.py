"""`kinetic-tui doctor`: checks of a home (`checks.examine`) and the repairs of what they find."""
