"""Random small programs for the whole-pipeline fuzz test (``test_fuzz.py``) and the checks that
every one of them must pass; ``test_fuzz_regressions.py`` replays the ones that once failed.

A program is a ``Recipe``: its inputs (shape, dtype, layout, an optional dynamic dim) and a list
of ``Step``s, each an op applied to earlier values. ``check_program`` compiles it, verifies the
plan, runs it (at the example sizes and, with a dynamic dim, at another size) and compares every
output with eager PyTorch, values and layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch.export import Dim

import tensorplan as tp
from tensorplan.specs.layout import same_layout

CL = torch.channels_last


@dataclass(frozen=True)
class Input:
    """One input of a recipe."""

    shape: tuple[int, ...]        # example shape
    dtype: torch.dtype            # float32, float16, int64 or bool
    layout: str                   # "contiguous", "channels_last" (rank 4) or "permuted"
    dynamic_dim: int | None = None  # a dim exported as Dim("d", min=Recipe.dynamic_min, max=64)

    def make(self, shape: tuple[int, ...], seed: int) -> torch.Tensor:
        """A tensor of ``shape`` in this input's dtype and layout."""
        generator = torch.Generator().manual_seed(seed)
        if self.layout == "permuted":
            base = _values(tuple(reversed(shape)), self.dtype, generator)
            return base.permute(*reversed(range(len(shape))))
        value = _values(shape, self.dtype, generator)
        return value.to(memory_format=CL) if self.layout == "channels_last" else value


def _values(shape: tuple[int, ...], dtype: torch.dtype, generator) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randn(shape, generator=generator) > 0
    if dtype == torch.int64:
        return torch.randint(-4, 5, shape, generator=generator)
    return torch.randn(shape, generator=generator).to(dtype)


@dataclass(frozen=True)
class Step:
    """One op of a recipe: ``op(*[values[i] for i in operands], **params)``."""

    op: str                        # a key of OPS
    operands: tuple[int, ...]      # indices of earlier values
    params: tuple = ()             # the op's extra arguments, as (name, value) pairs

    def apply(self, values: list[torch.Tensor]) -> torch.Tensor:
        return OPS[self.op](*(values[i] for i in self.operands), **dict(self.params))


def _cat(a, b, dim):
    return torch.cat([a, b], dim)


def _split(a, dim, size, index):
    return a.split(size, dim)[index]


def _cat_legacy_empty(a, dim, first):
    """``cat`` with a 1-D ``(0,)`` tensor, which ``cat`` skips whatever the other's rank."""
    empty = a.reshape(-1)[:0]
    return torch.cat([empty, a] if first else [a, empty], dim)


def _split_empty(a, dim, size, index):
    """One piece of ``a`` split into ``[size, 0, rest]`` along ``dim``: the middle is empty."""
    return a.split_with_sizes([size, 0, a.shape[dim] - size], dim)[index]


OPS = {
    "relu": lambda a: torch.relu(a),
    "neg": lambda a: -a,
    "abs": lambda a: a.abs(),
    "sigmoid": lambda a: torch.sigmoid(a),
    "affine": lambda a: a * 3 + 1,
    "not": lambda a: ~a,
    "float": lambda a: a.float(),
    "half": lambda a: a.half(),
    "long": lambda a: a.long(),
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "maximum": lambda a, b: torch.maximum(a, b),
    "and": lambda a, b: a & b,
    "where": lambda c, a, b: torch.where(c, a, b),
    "add_max": lambda a, dim: a + a.amax(dim, keepdim=True),
    "or_any": lambda a, dim: a | a.any(dim, keepdim=True),
    "add_first": lambda a, dim: a + a.narrow(dim, 0, 1),
    "sum": lambda a, dim, keepdim: a.sum(dim, keepdim=keepdim),
    "amax": lambda a, dim, keepdim: a.amax(dim, keepdim=keepdim),
    "mean": lambda a, dim, keepdim: a.mean(dim, keepdim=keepdim),
    "flatten": lambda a: a.reshape(-1),
    "transpose": lambda a, i, j: a.transpose(i, j),
    "unsqueeze": lambda a, dim: a.unsqueeze(dim),
    "squeeze": lambda a, dim: a.squeeze(dim),
    "slice_step": lambda a, dim: a[(slice(None),) * dim + (slice(None, None, 2),)],
    "expand": lambda a, dim: a.expand(*[3 if d == dim else -1 for d in range(a.dim())]),
    "masked_select": lambda a, b: torch.masked_select(a, b > 0),
    "nonzero": lambda a: torch.nonzero(a),
    "cat": _cat,
    "cat_legacy_empty": _cat_legacy_empty,
    "cat_derived": lambda a, dim: torch.cat([a, a * 2], dim),
    "split": _split,
    "split_empty": _split_empty,
    "matmul": lambda a: a @ a.transpose(-1, -2),
    "batched_matmul": lambda a: torch.matmul(a.unsqueeze(0).expand(2, *a.shape),
                                             a.transpose(-1, -2)),
    "expand_batch": lambda a: a.unsqueeze(0).expand(2, *a.shape),
    "add_in_place": lambda a: a.clone().add_(1),
    "permute": lambda a, dims: a.permute(*dims),
    "contiguous": lambda a: a.contiguous(),
    "to_channels_last": lambda a: a.to(memory_format=CL),
    "clone_channels_last": lambda a: a.clone(memory_format=CL),
    "clone": lambda a: a.clone(),
}


@dataclass(frozen=True)
class Recipe:
    """A random program: its inputs, its steps, and which values it returns."""

    inputs: tuple[Input, ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]       # indices into inputs + step results
    dynamic_min: int = 2           # the dynamic dim's lower bound: 0 also runs it at 0 and 1

    def module(self, live_only: bool = False) -> torch.nn.Module:
        """The program as a module (``live_only``: without the steps no output depends on)."""
        return _RecipeModule(self, self.live_steps() if live_only else range(len(self.steps)))

    def live_steps(self) -> frozenset[int]:
        """The steps some output depends on."""
        first, live, wanted = len(self.inputs), set(), set(self.outputs)
        for index in reversed(range(len(self.steps))):
            if first + index in wanted:
                live.add(index)
                wanted.update(self.steps[index].operands)
        return frozenset(live)

    def example(self, grow: bool = False, seed: int = 0,
                size: int | None = None) -> tuple[torch.Tensor, ...]:
        """Inputs at the example sizes, or with every dynamic dim at another size (``grow``:
        twice the example's plus one; ``size``: that size)."""
        made = []
        for i, spec in enumerate(self.inputs):
            shape = list(spec.shape)
            if spec.dynamic_dim is not None and (grow or size is not None):
                shape[spec.dynamic_dim] = 2 * shape[spec.dynamic_dim] + 1 if grow else size
            made.append(spec.make(tuple(shape), seed + i))
        return tuple(made)

    def dynamic_shapes(self):
        if all(spec.dynamic_dim is None for spec in self.inputs):
            return None
        dim = Dim("d", min=self.dynamic_min, max=64)
        return (tuple({spec.dynamic_dim: dim} if spec.dynamic_dim is not None else None
                      for spec in self.inputs),)  # forward(*inputs) takes them as one tuple


class _RecipeModule(torch.nn.Module):
    def __init__(self, recipe: Recipe, steps) -> None:
        super().__init__()
        self.recipe, self.steps = recipe, frozenset(steps)

    def forward(self, *inputs):
        values = list(inputs)
        for index, step in enumerate(self.recipe.steps):
            values.append(step.apply(values) if index in self.steps else None)
        return tuple(values[i] for i in self.recipe.outputs)


def compile_recipe(recipe: Recipe) -> tp.Program:
    """The recipe compiled with ``tp.compile``'s defaults."""
    return tp.compile(recipe.module(), recipe.example(), dynamic_shapes=recipe.dynamic_shapes())


# How a run refuses inputs: a size outside the trace, or a kernel failing as eager's does
# (an InternalError whose cause is the kernel's error: tensorplan cannot tell it from a bug).
REFUSALS = (tp.InputError, tp.InternalError)


def _eager(recipe: Recipe, inputs: tuple[torch.Tensor, ...]):
    """Eager's outputs, and whether a run may refuse the inputs all the same.

    Eager refuses data such as ``amax`` of nothing or shapes that no longer broadcast:
    ``(None, True)`` when a step some output needs refuses; ``(outputs, True)`` when only a
    step no output needs does (export drops such a step, or keeps its runtime check).
    """
    try:
        return recipe.module()(*inputs), False
    except (RuntimeError, IndexError):
        try:
            return recipe.module(live_only=True)(*inputs), True
        except (RuntimeError, IndexError):
            return None, True


def check_program(recipe: Recipe, prog: tp.Program) -> None:
    """The plan verifies, and every run equals eager: values, and outputs in their planned
    layout; inputs that eager refuses in a step some output needs are refused too (an error,
    never a result), and inputs refused with an ``InputError`` are those torch.export's own
    program refuses. Runs at every size of a range that starts at 0 (0 and 1 included)."""
    prog.plan.verify()
    runs = [recipe.example(seed=10), recipe.example()]
    if recipe.dynamic_shapes() is not None:
        runs.append(recipe.example(grow=True, seed=20))
        runs += [recipe.example(size=size, seed=30) for size in range(recipe.dynamic_min, 2)]
    output_names = [str(o) for o in prog.exported_program.graph_signature.user_outputs]
    for inputs in runs:
        expected, may_refuse = _eager(recipe, inputs)
        if expected is None:
            with pytest.raises(REFUSALS) as failed:
                prog.run(*inputs)
            assert failed.type is tp.InputError or isinstance(failed.value.__cause__,
                                                              (RuntimeError, IndexError))
            continue
        refusals = REFUSALS if may_refuse else (tp.InputError,)
        try:
            actual = prog.run(*inputs)
        except refusals:
            if not may_refuse:  # a size torch.export assumed: its own program refuses it too
                with pytest.raises(RuntimeError, match="Runtime assertion failed"):
                    prog.exported_program.module()(*inputs)
            continue
        torch.testing.assert_close(actual, expected, equal_nan=True)
        for value, name in zip(actual, output_names, strict=True):
            spec = prog.specs.get(name)
            if (isinstance(spec, tp.TensorSpec) and spec.view_strides is None
                    and value.dim() == len(spec.shape)):  # (a squeezed data-dependent dim)
                assert same_layout(value.shape, value.dim_order(), spec.dim_order), name
