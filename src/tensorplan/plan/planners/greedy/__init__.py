"""The greedy family: fast plans with no proof, each buffer placed once by best fit.

``naive.py`` stacks every buffer; ``portfolio.py`` runs a few buffer orders and keeps the best;
``sweep.py`` is best fit as a sweep over time (the portfolio's peak sweeps); ``best_fit.py``
is best fit in a given order through ``occupancy.py``'s interval index; ``repair.py`` re-places a
plan with the buffers that stick out first (squeaky wheel).
"""

from tensorplan.plan.planners.greedy.naive import plan_naive
from tensorplan.plan.planners.greedy.portfolio import best_greedy, plan_greedy
from tensorplan.plan.planners.greedy.repair import squeaky_wheel

__all__ = ["best_greedy", "plan_greedy", "plan_naive", "squeaky_wheel"]
