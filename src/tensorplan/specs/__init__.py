"""Propagate: an ``ExportedProgram`` (and its ``Roles``) in, a ``SpecTable`` out: one
``TensorSpec`` per value, subgraphs included, from one re-trace in the program's own ShapeEnv
(``propagate.py``, ``trace.py``), with upper bounds (``bounds.py``), the bounds of
data-dependent ops (``limits.py``) and dim orders (``layout.py``); ``spec.py`` holds the types."""
