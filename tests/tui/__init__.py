"""Pilot tests of the Textual console."""
