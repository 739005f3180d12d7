"""Program rewrites, opt-in: an ``ExportedProgram`` in, an equivalent ``ExportedProgram`` out
that needs less memory at once (``patches.py``: the high-resolution prefix of a CNN run patch
by patch)."""
