"""Serving: a registry version behind a real HTTP router and instance processes that the autoscaler governs."""
