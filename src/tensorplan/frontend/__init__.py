"""Capture: a model and its example inputs (or a saved ``.pt2``) in, an ``ExportedProgram`` in
core ATen out (``capture.py``, ``pt2.py``), and the role of each of its placeholders and
outputs read from the graph signature (``roles.py`` → ``Roles``)."""
