"""The torch-free planner core: buffers with lifetimes in, offsets and a peak out.

Start at ``plan_buffers`` (``dispatch.py``): it turns the buffers into a ``Problem``, runs the
planner ``algorithm`` names, and checks the plan with ``tensorplan.plan.validate``.
``PlannerParams`` (``params.py``) holds every tuning constant and pruning switch; ``budget.py``
counts the search steps every budget is measured in. The layers, each using only the ones above it:

- ``problem/``: the data model (``Buffer``, ``Problem``, ``Placement``), the compact
  ``Instance`` every planner works on, and the lower bound;
- ``greedy/``: ``naive``, the greedy portfolio of best-fit orders (peak sweeps and the
  occupancy index) and squeaky-wheel ``repair``;
- ``exact/``: the branch and bound, its window probes, and the ``optimal`` driver that runs a
  ladder of capacity probes under a step budget.

A new planner is a function ``(Instance, bound, time_limit, PlannerParams) -> Outcome`` in the
layer it belongs to, registered by name in ``dispatch.PLANNERS``; its knobs go in
``PlannerParams``.

>>> from tensorplan.plan.planners import Buffer, PlannerParams, plan_buffers
>>> plan_buffers([Buffer(8, 0, 2), Buffer(8, 2, 4)]).offsets
(0, 0)
>>> plan_buffers([Buffer(8, 0, 2), Buffer(8, 1, 4)], params=PlannerParams(dominance=False)).peak
16
"""

from tensorplan.plan.planners.dispatch import plan_buffers
from tensorplan.plan.planners.params import PlannerParams
from tensorplan.plan.planners.problem import Buffer, Placement, Problem, lower_bound

__all__ = ["Buffer", "Placement", "PlannerParams", "Problem", "lower_bound", "plan_buffers"]
