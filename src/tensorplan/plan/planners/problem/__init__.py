"""The problem layer: what every planner reads and returns, and the bound none can beat.

``data.py`` holds the public data model (``Buffer``, ``Problem``, ``Placement``); ``instance.py``
the compact ``Instance`` the planners work on (sizes in units, time in sections);
``lower_bound.py`` the most bytes live at one time.
"""

from tensorplan.plan.planners.problem.data import Buffer, Placement, Problem
from tensorplan.plan.planners.problem.instance import Instance, peak_of, section_loads, to_instance
from tensorplan.plan.planners.problem.lower_bound import lower_bound

__all__ = ["Buffer", "Instance", "Placement", "Problem", "lower_bound", "peak_of",
           "section_loads", "to_instance"]
