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
from tensorplan.layout import same_layout

CL = torch.channels_last


@dataclass(frozen=True)
class Input:
    """One input of a recipe."""

    shape: tuple[int, ...]        # example shape
    dtype: torch.dtype            # float32, float16, int64 or bool
    layout: str                   # "contiguous", "channels_last" (rank 4) or "permuted"
    dynamic_dim: int | None = None  # a dim exported as Dim("d", min=2, max=2 * size + 1)

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
    "split": _split,
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

    def module(self) -> torch.nn.Module:
        return _RecipeModule(self)

    def example(self, grow: bool = False, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Inputs at the example sizes, or with every dynamic dim at another size."""
        made = []
        for i, spec in enumerate(self.inputs):
            shape = list(spec.shape)
            if grow and spec.dynamic_dim is not None:
                shape[spec.dynamic_dim] = 2 * shape[spec.dynamic_dim] + 1
            made.append(spec.make(tuple(shape), seed + i))
        return tuple(made)

    def dynamic_shapes(self):
        if all(spec.dynamic_dim is None for spec in self.inputs):
            return None
        dim = Dim("d", min=2, max=64)
        return (tuple({spec.dynamic_dim: dim} if spec.dynamic_dim is not None else None
                      for spec in self.inputs),)  # forward(*inputs) takes them as one tuple


class _RecipeModule(torch.nn.Module):
    def __init__(self, recipe: Recipe) -> None:
        super().__init__()
        self.recipe = recipe

    def forward(self, *inputs):
        values = list(inputs)
        for step in self.recipe.steps:
            values.append(step.apply(values))
        return tuple(values[i] for i in self.recipe.outputs)


def compile_recipe(recipe: Recipe) -> tp.Program:
    """The recipe compiled with ``tp.compile``'s defaults."""
    return tp.compile(recipe.module(), recipe.example(), dynamic_shapes=recipe.dynamic_shapes())


def check_program(recipe: Recipe, prog: tp.Program) -> None:
    """The plan verifies, and every run equals eager: values, and outputs in their planned
    layout; inputs that eager refuses are refused too (an error, never a result), and inputs
    refused with an ``InputError`` are those torch.export's own program refuses."""
    prog.plan.verify()
    model = recipe.module()
    runs = [recipe.example(seed=10), recipe.example()]
    if recipe.dynamic_shapes() is not None:
        runs.append(recipe.example(grow=True, seed=20))
    output_names = [str(o) for o in prog.exported_program.graph_signature.user_outputs]
    for inputs in runs:
        try:
            expected = model(*inputs)
        except (RuntimeError, IndexError):  # data the model refuses (amax of nothing, shapes
            with pytest.raises(tp.InternalError) as failed:  # that no longer broadcast)
                prog.run(*inputs)
            assert isinstance(failed.value.__cause__, (RuntimeError, IndexError))
            continue
        try:
            actual = prog.run(*inputs)
        except tp.InputError:  # a size torch.export assumed: its own program refuses it too
            with pytest.raises(RuntimeError, match="Runtime assertion failed"):
                prog.exported_program.module()(*inputs)
            continue
        torch.testing.assert_close(actual, expected, equal_nan=True)
        for value, name in zip(actual, output_names, strict=True):
            spec = prog.specs.get(name)
            if (isinstance(spec, tp.TensorSpec) and spec.view_strides is None
                    and value.dim() == len(spec.shape)):  # (a squeezed data-dependent dim)
                assert same_layout(value.shape, value.dim_order(), spec.dim_order), name
