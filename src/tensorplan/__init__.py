"""tensorplan: take a PyTorch model to a fixed, verified memory plan and run it.

The stages, one package each, data flowing one way: ``frontend`` (capture) → ``rewrite``
(opt-in) → ``specs`` (propagate) → ``analysis`` (alias, liveness) → ``schedule`` → ``banks``
→ ``plan`` → ``runtime`` / ``report`` / ``formats`` / ``integrations``; ``program.py`` runs
them (``tp.compile``). The names below are loaded when first used, so that importing
``tensorplan`` (and the command line's parser) costs no torch import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tensorplan.errors import (
    CaptureError,
    FormatError,
    InputError,
    InternalError,
    LayoutError,
    PlanError,
    ShipError,
    TensorPlanError,
    UnboundedShapeError,
    UnsupportedOpError,
)
from tensorplan.frontend.torchvision_import import install as _install_torchvision_hook

_install_torchvision_hook()  # a user's `import timm` works beside the CPU torch

if TYPE_CHECKING:
    from tensorplan.banks.choice import Bank
    from tensorplan.frontend.capture import capture
    from tensorplan.options import CompileOptions
    from tensorplan.plan.plan import BankPlan, MemoryPlan, PlannedRegion, PlannedStorage
    from tensorplan.plan.planners import Buffer, Placement, PlannerParams, plan_buffers
    from tensorplan.program import Program, compile, load
    from tensorplan.specs.propagate import propagate
    from tensorplan.specs.spec import SpecTable, TensorSpec

_LAZY = {  # public name -> the module that defines it
    "Bank": "tensorplan.banks.choice",
    "capture": "tensorplan.frontend.capture",
    "CompileOptions": "tensorplan.options",
    "BankPlan": "tensorplan.plan.plan",
    "MemoryPlan": "tensorplan.plan.plan",
    "PlannedRegion": "tensorplan.plan.plan",
    "PlannedStorage": "tensorplan.plan.plan",
    "Buffer": "tensorplan.plan.planners",
    "Placement": "tensorplan.plan.planners",
    "PlannerParams": "tensorplan.plan.planners",
    "plan_buffers": "tensorplan.plan.planners",
    "Program": "tensorplan.program",
    "compile": "tensorplan.program",
    "load": "tensorplan.program",
    "propagate": "tensorplan.specs.propagate",
    "SpecTable": "tensorplan.specs.spec",
    "TensorSpec": "tensorplan.specs.spec",
}
_PACKAGES = frozenset({"analysis", "banks", "cli", "formats", "frontend", "integrations", "ops",
                       "plan", "report", "rewrite", "runtime", "schedule", "specs", "zoo"})


def __getattr__(name: str) -> Any:
    """A public name or a stage package, imported on first use (``tp.compile``, ``tp.report``)."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _PACKAGES:
        value = importlib.import_module(f"tensorplan.{name}")
    else:
        raise AttributeError(f"module 'tensorplan' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_PACKAGES})


__all__ = [
    "Bank",
    "BankPlan",
    "Buffer",
    "CompileOptions",
    "MemoryPlan",
    "Placement",
    "PlannerParams",
    "PlannedRegion",
    "PlannedStorage",
    "Program",
    "compile",
    "load",
    "plan_buffers",
    "CaptureError",
    "FormatError",
    "InputError",
    "InternalError",
    "LayoutError",
    "PlanError",
    "ShipError",
    "SpecTable",
    "TensorPlanError",
    "TensorSpec",
    "UnboundedShapeError",
    "UnsupportedOpError",
    "capture",
    "propagate",
]
