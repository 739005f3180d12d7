"""Run: a ``Program`` in, its outputs out, every value computed in a view of one arena by
out-variant kernels: ``runner.py`` → ``graph.py`` → the lowering table (``lower.py``) and the
steps (``steps.py``), with planned views and layout checks in ``frames.py``."""
