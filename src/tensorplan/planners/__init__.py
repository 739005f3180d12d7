"""The torch-free planner core: buffers with lifetimes in, offsets and a peak out.

>>> from tensorplan.planners import Buffer, plan_buffers
>>> plan_buffers([Buffer(8, 0, 2), Buffer(8, 2, 4)]).offsets
(0, 0)
"""

from tensorplan.planners.dispatch import plan_buffers
from tensorplan.planners.lower_bound import lower_bound
from tensorplan.planners.problem import Buffer, Placement, Problem

__all__ = ["Buffer", "Placement", "Problem", "lower_bound", "plan_buffers"]
