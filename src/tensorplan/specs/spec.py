"""The data model of propagation: one ``TensorSpec`` per tensor value, in a ``SpecTable``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import sympy
import torch

from tensorplan.frontend.dim_names import named

MAX_BYTES = 2**63 - 1  # the largest byte count a 64-bit signed size (torch, C) holds


@dataclass(frozen=True)
class TensorSpec:
    """What a planner and a device runtime must know about one tensor value.

    All int fields are at the upper bound of every dynamic dim, so a buffer of ``nbytes``
    holds the tensor at any size the program accepts.
    """

    shape: tuple[int, ...]            # upper bound of each dim, logical order
    sym_shape: tuple[int | torch.SymInt, ...]  # sizes as traced (SymInts of the ShapeEnv)
    dtype: torch.dtype                # element type
    dim_order: tuple[int, ...]        # dims from outermost to innermost in memory
    strides: tuple[int, ...]          # element strides per logical dim, dense in dim_order
    nbytes: int                       # bytes of the dense tensor at the upper-bound shape
    const: bool = False               # parameter, never-mutated buffer or lifted constant
    storage: int | None = None        # storage id after alias analysis; None before / for const
    view_strides: tuple[int | torch.SymInt, ...] | None = None  # strides as traced where they
    #                                   are not the dense ones (a view: 0 for broadcast dims,
    #                                   steps, as_strided); None when dense in dim_order
    view_offset: int | torch.SymInt = 0  # elements from its storage's start, as re-traced
    #                                      (a view's; a loaded program's meta may not say)

    @property
    def is_dynamic(self) -> bool:
        """True when some dim is symbolic (its size is only known at run time)."""
        return any(isinstance(s, torch.SymInt) for s in self.sym_shape)

    @property
    def is_empty(self) -> bool:
        """True when the tensor holds no element at any size the program accepts (some dim's
        upper bound is 0): it takes no byte, and a ``cat`` skips it."""
        return 0 in self.shape

    def with_storage(self, storage: int | None) -> TensorSpec:
        """A copy of this spec assigned to ``storage``."""
        return replace(self, storage=storage)

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        """One-line human form, e.g. ``float32[seq<=128,64] dim_order=(0,1) 32768B``, each
        symbolic dim written by its Dim name where ``names`` (symbol -> name) has it."""
        dims = ",".join(dim_text(s, u, names or {})
                        for s, u in zip(self.sym_shape, self.shape, strict=True))
        dtype = str(self.dtype).removeprefix("torch.")
        order = ",".join(map(str, self.dim_order))
        return f"{dtype}[{dims}] dim_order=({order}) {self.nbytes}B"


def canonical(size: int | torch.SymInt) -> int | sympy.Expr:
    """A size as an int, or as its expression in the ShapeEnv's canonical symbols."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    node = size.node
    expr = node.shape_env.replace(node.expr)
    return int(expr) if expr.is_number else expr


def dim_text(sym: int | torch.SymInt, upper: int, names: Mapping[str, str]) -> str:
    """A dim's size: its int, or ``expression<=upper bound`` with the Dim names of ``names``."""
    return str(upper) if isinstance(sym, int) else f"{named(canonical(sym), names)}<={upper}"


Entry = TensorSpec | tuple[TensorSpec | None, ...] | None


class SpecTable(Mapping[str, Entry]):
    """Read-only mapping from value name to its spec.

    Keys are node names of the top-level graph, and ``"<submodule>/<node>"`` for nodes inside
    subgraphs. Values are a ``TensorSpec``, a tuple of specs (``None`` for non-tensor items) for
    multi-output nodes, or ``None`` for non-tensor values.
    """

    def __init__(self, entries: Mapping[str, Entry],
                 dim_names: Mapping[str, str] | None = None) -> None:
        self._entries = dict(entries)
        self.dim_names: Mapping[str, str] = dict(dim_names or {})  # symbol -> the user's Dim name

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"SpecTable({len(self)} values)"

    def describe(self, value: str) -> str:
        """The one-line form of a value's spec (``TensorSpec.describe``) with the Dim names,
        e.g. ``float32[seq<=128,64] dim_order=(0,1) 32768B``; KeyError for a non-tensor."""
        spec = self.spec_of(value)
        if spec is None:
            raise KeyError(f"{value!r} is no tensor value of this table")
        return spec.describe(self.dim_names)

    def spec_of(self, value: str) -> TensorSpec | None:
        """The spec of a value named ``name`` or, for an item of a multi-output value,
        ``name[i]``; None for non-tensors and unknown names."""
        base, _, index = value.partition("[")
        entry = self._entries.get(base)
        if index and isinstance(entry, tuple):
            return entry[int(index.rstrip("]"))]
        return entry if isinstance(entry, TensorSpec) else None

    def tensors(self) -> Iterator[tuple[str, TensorSpec]]:
        """Every tensor spec with its name; items of multi-output values as ``name[i]``."""
        for name, entry in self._entries.items():
            if isinstance(entry, TensorSpec):
                yield name, entry
            elif isinstance(entry, tuple):
                for i, item in enumerate(entry):
                    if item is not None:
                        yield f"{name}[{i}]", item
