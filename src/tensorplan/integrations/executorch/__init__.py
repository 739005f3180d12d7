"""tensorplan's plan in ExecuTorch programs.

- :func:`to_executorch` (``ship.py``): a ``.pte`` with tensorplan's node order, in-place reuse
  over measured kernels (``kernels.py``), concatenation in place (``links.py``), folding and
  planner, run by ExecuTorch's own runtime; :func:`lower` also returns its figures.
- :func:`run_pte` / :func:`check_pte` (``check.py``): a ``.pte`` run in ExecuTorch's runtime
  (the program held while its method runs), and compared with eager.
- :func:`emulate_pte` (``emulate.py``): a ``.pte`` run from its bytes with its memory plan, each
  kernel through its Python implementation: a check of the plan of a program whose kernels
  ExecuTorch's pip runtime lacks (Cortex-M).
- :func:`tensorplan_memory_planning` / :func:`tensorplan_algo` (``algo.py``): only tensorplan's
  planner inside ExecuTorch's own ``MemoryPlanningPass``.

``executorch`` is imported only when one of these is called; without it they raise
:class:`~tensorplan.errors.TensorPlanError` saying how to install it.
"""

from tensorplan.integrations.executorch.algo import tensorplan_algo, tensorplan_memory_planning
from tensorplan.integrations.executorch.check import PteCheck, check_pte, run_pte
from tensorplan.integrations.executorch.emulate import emulate_pte
from tensorplan.integrations.executorch.ship import (
    Shipped,
    executorch_arena_bytes,
    lower,
    to_executorch,
)

__all__ = ["PteCheck", "Shipped", "check_pte", "emulate_pte", "executorch_arena_bytes", "lower",
           "run_pte", "tensorplan_algo", "tensorplan_memory_planning", "to_executorch"]
