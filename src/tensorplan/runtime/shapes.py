"""Run-time sizes: symbolic dims of the specs evaluated with the symbols bound by the inputs
(``Dim`` sizes) and by data-dependent ops as they run (unbacked sizes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sympy
import torch

from tensorplan.specs.spec import canonical

Bindings = dict[sympy.Symbol, int]


@dataclass(frozen=True)
class SymbolicShape:
    """A shape whose dims are ints or sympy expressions."""

    dims: tuple[int | sympy.Expr, ...]  # one per dim

    @classmethod
    def of(cls, sym_shape: Sequence[int | torch.SymInt]) -> SymbolicShape:
        """The symbolic shape of a traced ``sym_shape``."""
        return cls(tuple(canonical(s) for s in sym_shape))

    @property
    def symbols(self) -> frozenset[sympy.Symbol]:
        """Free symbols of all dims."""
        return frozenset(s for d in self.dims if not isinstance(d, int) for s in d.free_symbols)

    def evaluate(self, bindings: Mapping[sympy.Symbol, int]) -> tuple[int, ...]:
        """The concrete shape under ``bindings`` (every free symbol must be bound)."""
        return tuple(d if isinstance(d, int) else _evaluate(d, bindings) for d in self.dims)


def _evaluate(expr: sympy.Expr, bindings: Mapping[sympy.Symbol, int]) -> int:
    if expr.is_Symbol:
        return bindings[expr]
    return int(expr.xreplace({s: sympy.Integer(bindings[s]) for s in expr.free_symbols}))
