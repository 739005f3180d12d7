"""The project's exception types: every error tensorplan raises on purpose is one of these."""

from __future__ import annotations


class TensorPlanError(Exception):
    """Base of every tensorplan error."""


class CaptureError(TensorPlanError):
    """The model could not be exported to a core-ATen program."""


class UnboundedShapeError(TensorPlanError):
    """A dimension has no finite upper bound, so no fixed plan can hold it."""


class UnsupportedOpError(TensorPlanError):
    """An operator or graph construct that a stage cannot handle."""


class PlanError(TensorPlanError):
    """A memory plan is invalid: two live storages overlap or an offset breaks alignment."""


class InputError(TensorPlanError):
    """Inputs given to a program do not match what it was compiled for."""


class LayoutError(TensorPlanError):
    """A tensor's memory layout differs from the one its spec promises."""


class FormatError(TensorPlanError):
    """A file is not a valid tensorplan artifact or benchmark instance."""
