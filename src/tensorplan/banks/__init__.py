"""Banks: the storages with their lifetimes and accesses in, an ``Assignment`` out: the memory
bank of each storage, with the traffic cost minimised within the capacities and its proven
bound (``choice.py``), and values copied once between banks where that costs less
(``moves.py``)."""
