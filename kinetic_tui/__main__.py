"""`python -m kinetic_tui` is the `kinetic-tui` command."""

from kinetic_tui.cli.main import main

main()
