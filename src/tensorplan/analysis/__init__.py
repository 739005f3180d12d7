"""What the graph implies for memory: a ``SpecTable`` and ``Roles`` in, the ``AliasTable`` out
(which values share a storage, from operator schemas: ``alias.py``); and over a chosen node
order, the half-open lifetime of every storage per graph (``liveness.py`` → lifetimes)."""
