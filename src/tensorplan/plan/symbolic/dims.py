"""The data model of symbolic plans: the program's dynamic dims (``DimRange``) and every
offset, size and the arena as expressions in them (``SymbolicPlan``). ``stack.py`` makes
one from a concrete plan; ``MemoryPlan.at`` evaluates it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tensorplan.errors import InputError
from tensorplan.plan.symbolic.sizes import Box, SizeExpr


@dataclass(frozen=True)
class DimRange:
    """One dynamic dim of the program's inputs."""

    name: str      # the Dim's name (the symbol's when the program does not carry it)
    symbol: str    # the ShapeEnv symbol, e.g. "s27"
    lower: int     # smallest size accepted
    upper: int     # largest size accepted (the concrete plan's)
    example: int   # the size it was traced at


@dataclass(frozen=True)
class SymbolicPlan:
    """Offsets and sizes of every storage, and the arena, as expressions in the dims."""

    dims: tuple[DimRange, ...]             # the dims the expressions are in, by name
    alignment: int                         # every expression's value is a multiple of it
    arena: SizeExpr                        # bytes of the arena
    offsets: Mapping[int, SizeExpr]        # storage id -> byte offset
    sizes: Mapping[int, SizeExpr]          # storage id -> bytes reserved (aligned)
    needs: Mapping[int, SizeExpr]          # storage id -> bytes its largest value takes
    region_offsets: Mapping[str, SizeExpr]  # control-flow node -> its region's offset
    held: Mapping[int, str]                # storage id -> why its size is its bound's

    @property
    def box(self) -> Box:
        """Every dim's range."""
        return Box({d.name: (d.lower, d.upper) for d in self.dims})

    def sizes_at(self, given: Mapping[str, int]) -> dict[str, int]:
        """Every dim's size by name: ``given`` by its ``Dim`` name (or torch's symbol), the
        others at their upper bound. Raises ``InputError`` for an unknown dim or a size outside
        its range."""
        known = {d.name: d for d in self.dims} | {d.symbol: d for d in self.dims}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise InputError(f"plan: no dynamic dim named {', '.join(unknown)}; the program's "
                             f"dims are {self.listed()}{self._unnamed_hint()}")
        sizes = {d.name: d.upper for d in self.dims}
        for name, size in given.items():
            dim = known[name]
            if not isinstance(size, int) or not dim.lower <= size <= dim.upper:
                raise InputError(f"plan: {name}={size!r} is outside its range "
                                 f"[{dim.lower}, {dim.upper}]")
            sizes[dim.name] = int(size)
        return sizes

    def listed(self) -> str:
        """Every dim with its range, e.g. ``seq in [2, 128], batch in [1, 8]``."""
        return ", ".join(f"{d.name} in [{d.lower}, {d.upper}]" for d in self.dims)

    def _unnamed_hint(self) -> str:
        """Why a dim goes by torch's symbol: its program kept no ``Dim`` name."""
        if all(d.name != d.symbol for d in self.dims):
            return ""
        return ("; a dim goes by torch's symbol where the program records no Dim name "
                "(torch.export.save keeps none: give the model and its dynamic_shapes, or a "
                "program saved by tensorplan, to use the names)")
