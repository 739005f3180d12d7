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


class ShipError(TensorPlanError):
    """A shipped program (a ``.pte``) that its runtime refuses to load or run, or whose outputs
    differ from eager PyTorch: the message carries the runtime's own error."""


class InternalError(TensorPlanError):
    """A bug in tensorplan, not in the model or its inputs: a stage failed in a way it did not
    mean to. ``__cause__`` is the original exception; ``summary`` (one line) names the stage,
    where in tensorplan it failed and what to attach to a report; ``node`` is the node being
    processed with its op and argument shapes (None when not known)."""

    def __init__(self, summary: str, stage: str, node: str | None = None) -> None:
        super().__init__(summary, stage, node)
        self.summary, self.stage, self.node = summary, stage, node

    def __str__(self) -> str:
        return self.summary if self.node is None else f"{self.summary}\n  at node {self.node}"
