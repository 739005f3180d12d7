"""Plan: the lifetimes and storages in, a verified ``MemoryPlan`` out: byte offsets of every
storage in one arena per bank (``plan.py``), each graph solved by the torch-free
``planners/``, checked once by ``validate.py`` (which shares no code with them); the peak
step (``peak.py``) and the arena against a budget (``budget.py``); for dynamic dims, the plan
as expressions in the dims (``symbolic/``)."""
