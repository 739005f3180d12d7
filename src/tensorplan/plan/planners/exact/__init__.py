"""The exact search: a plan proven minimal, or the best one found within a step budget.

``optimal.py`` is the driver (greedy, repair, then a ladder of capacity probes);
``branch_and_bound.py`` answers "do the buffers fit under this capacity?" as a resumable probe
over a ``search_instance.py`` (an instance with the lookups the search reads at every node);
``windows.py`` probes only the part of a large instance where memory is tight. Every part
spends a step budget (``planners/budget.py``).
"""

from tensorplan.plan.planners.exact.optimal import SearchOutcome, plan_optimal

__all__ = ["SearchOutcome", "plan_optimal"]
