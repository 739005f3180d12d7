"""Schedule: the specs, roles and ``AliasTable`` in, a ``Schedule`` out: the steps that lower
the bound itself, each switchable (``schedule.py`` drives them): constants folded
(``fold.py``), a node order (``order.py``), outputs written over dying inputs (``reuse.py``),
concatenations and pads made in place (``concat.py``)."""
