"""Planned views into the arena, and the per-size frames that cache them.

A *frame* is the environment of one graph (one slot per node) with everything that does not
depend on data already filled in for one set of input sizes: constants, the planned view of
every value, and the results of view ops. A run copies its frame and executes only kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tensorplan.errors import InputError, LayoutError, PlanError
from tensorplan.frontend.dim_names import named
from tensorplan.plan.plan import MemoryPlan
from tensorplan.runtime.arena import Arena
from tensorplan.runtime.lower import ProgramFacts
from tensorplan.runtime.shapes import Bindings
from tensorplan.specs.layout import same_layout
from tensorplan.specs.spec import TensorSpec

Env = list[Any]
Step = Callable[[Env, Bindings], None]


class Views:
    """Typed, strided views of planned values in one arena."""

    def __init__(self, facts: ProgramFacts, plan: MemoryPlan, arena: Arena) -> None:
        self.facts, self.plan, self.arena = facts, plan, arena
        self._dims = {} if plan.symbolic is None else \
            {d.symbol: d.name for d in plan.symbolic.dims}
        self._plans: dict[tuple[int, ...], MemoryPlan] = {}

    def plan_at(self, bindings: Bindings) -> MemoryPlan:
        """The concrete plan at the sizes of these bindings (the plan itself when static)."""
        if not self._dims:
            return self.plan
        sizes = {self._dims[str(s)]: v for s, v in bindings.items() if str(s) in self._dims}
        key = tuple(sizes[name] for name in sorted(sizes))
        if key not in self._plans:
            self._plans[key] = self.plan.at(**sizes)
        return self._plans[key]

    def of(self, name: str, index: int | None, bindings: Bindings) -> torch.Tensor:
        """The planned view of a value (``index`` picks an item) at its actual size."""
        spec = self.facts.items(name)[index or 0]
        plan = self.plan_at(bindings)
        offset = plan.address(spec.storage)
        shape = self.facts.shapes[(name, index)].evaluate(bindings)
        inside = self.facts.slices.get(name if index is None else f"{name}[{index}]")
        if inside is not None:
            view = self.arena.strided(offset + inside.offset, spec.dtype, shape, inside.strides)
        else:
            view = self.arena.view(offset, spec.dtype, shape, spec.dim_order)
        check_inside(name, view, offset, plan.storages[spec.storage].size)
        return view

    def outputs(self, name: str, op: Any, bindings: Bindings) -> Any:
        """The planned views of every output of a value, layout-checked: one tensor, or a
        tuple (``None`` for non-tensor items) for a multi-output value."""
        items = self.facts.items(name)
        multi = isinstance(self.facts.specs.get(name), tuple)
        made = [None if spec is None else self.of(name, i if multi else None, bindings)
                for i, spec in enumerate(items)]
        for view, spec in zip(made, items, strict=True):
            if view is not None:
                check_layout(name, view, spec, op)
        return tuple(made) if multi else made[0]

    def storage_start(self, spec: TensorSpec, name: str, bindings: Bindings) -> int:
        """Where the bytes of value ``name`` (of ``spec``) start in the arena at these sizes,
        in elements of its dtype: its storage's offset, plus its slice's when it is made in a
        slice of a concatenation."""
        inside = self.facts.slices.get(name)
        start = self.plan_at(bindings).address(spec.storage) + (inside.offset if inside else 0)
        return start // spec.dtype.itemsize


def check_inside(name: str, view: torch.Tensor, offset: int, reserved: int) -> None:
    """Raise ``PlanError`` when a planned view reaches past the bytes its storage reserves at
    this run's sizes (a wrong symbolic plan would write over its neighbour)."""
    if view.numel() == 0:
        return
    last = sum((n - 1) * s for n, s in zip(view.shape, view.stride(), strict=True) if n > 0)
    end = (view.storage_offset() + last + 1) * view.element_size()
    if end > offset + reserved:
        raise PlanError(f"runtime: value {name!r} of shape {tuple(view.shape)} ends at byte "
                        f"{end}, past the {reserved} B its storage reserves at {offset}: the "
                        "plan does not hold at these sizes — report this with the model")


def check_layout(name: str, tensor: torch.Tensor, spec: TensorSpec, op: Any) -> None:
    """Raise ``LayoutError`` when a tensor's memory layout is not the spec's."""
    actual = tuple(tensor.dim_order())
    if not same_layout(tensor.shape, actual, spec.dim_order):
        raise LayoutError(
            f"runtime: node {name!r} ({op}) of shape {tuple(tensor.shape)} {tensor.dtype}: "
            f"memory has dim_order {actual}, the spec says {spec.dim_order}; a kernel would "
            "misread it — report this with the model")


def check_view_shape(name: str, view: torch.Tensor, op: Any, traced: Sequence[int],
                     bindings: Bindings, names: Mapping[str, str]) -> None:
    """Raise ``InputError`` when a view's shape at this run's sizes is not its traced shape:
    torch.export traces a dynamic dim as if it were at least 2, and at 0 or 1 a view can
    come out otherwise (``narrow`` past the end, which eager refuses; ``squeeze`` of a dim
    that is 1). The sizes are named by ``names`` (symbol -> Dim name)."""
    if tuple(view.shape) != tuple(traced):
        sizes = ", ".join(f"{named(symbol, names)}={value}" for symbol, value in bindings.items())
        raise InputError(
            f"runtime: at {sizes} view {name!r} ({op}) has shape {tuple(view.shape)}, but the "
            f"program was traced for {tuple(traced)}: torch.export traced the dynamic dims as "
            "if they were at least 2, and the model does not follow that trace at these sizes "
            "(eager PyTorch may refuse them too); raise the Dim's min, or give such inputs "
            "another program")


def check_view(name: str, view: torch.Tensor, spec: TensorSpec, op: Any,
               strides: Sequence[int] | None) -> None:
    """Raise ``LayoutError`` unless a view addresses the memory its trace says: ``strides`` are
    its traced strides at this run's sizes (None for a view dense in its dim order, checked
    like any value). Size-1 dims address nothing; 0 strides and steps are compared as given.
    """
    if strides is None:
        check_layout(name, view, spec, op)
        return
    if view.numel() == 0:
        return
    actual = view.stride()
    if any(size > 1 and actual[d] != strides[d] for d, size in enumerate(view.shape)):
        raise LayoutError(
            f"runtime: view {name!r} ({op}) of shape {tuple(view.shape)} {view.dtype} has "
            f"strides {tuple(actual)}, the trace says {tuple(strides)}; a kernel would misread "
            "it — report this with the model")


class Frames:
    """The frames of one graph, built on first use for each set of input sizes."""

    def __init__(self, slots: int, steps: Sequence[Step], facts: ProgramFacts) -> None:
        self.slots, self.steps, self.backed = slots, tuple(steps), facts.backed
        self._cache: dict[tuple[int, ...], Env] = {}

    def get(self, bindings: Bindings) -> Env:
        """The frame for these input sizes (the cached one; do not modify it)."""
        key = tuple(bindings[s] for s in self.backed)
        frame = self._cache.get(key)
        if frame is None:
            frame = [None] * self.slots
            for step in self.steps:
                step(frame, bindings)
            self._cache[key] = frame
        return frame
