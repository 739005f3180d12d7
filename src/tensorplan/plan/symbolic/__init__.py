"""Symbolic plans: a concrete plan at the bounds in, every offset, size and the arena as
expressions in the dynamic dims out (``stack.py`` → ``SymbolicPlan`` in ``dims.py``), the
arithmetic in ``sizes.py``, proven over the whole range by ``validate.py`` (no code shared
with ``stack.py``)."""
