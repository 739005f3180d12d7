"""Bridges from tensorplan to other toolchains (each one an optional extra)."""
