"""tensorplan: take a PyTorch model to a fixed, verified memory plan and run it.

Stages (one module each, data flows one way): capture → propagate → alias → plan → run/report.
"""

from .banks import Bank
from .capture import capture
from .errors import (
    CaptureError,
    FormatError,
    InputError,
    InternalError,
    LayoutError,
    PlanError,
    TensorPlanError,
    UnboundedShapeError,
    UnsupportedOpError,
)
from .plan import BankPlan, MemoryPlan, PlannedRegion, PlannedStorage
from .planners import Buffer, Placement, PlannerParams, plan_buffers
from .program import Program, compile, load
from .propagate import propagate
from .spec import SpecTable, TensorSpec

__all__ = [
    "Bank",
    "BankPlan",
    "Buffer",
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
    "SpecTable",
    "TensorPlanError",
    "TensorSpec",
    "UnboundedShapeError",
    "UnsupportedOpError",
    "capture",
    "propagate",
]
