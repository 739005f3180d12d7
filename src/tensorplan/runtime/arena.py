"""The one preallocated arena and typed, strided views into it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tensorplan.errors import PlanError
from tensorplan.specs.layout import dense_strides


class Arena:
    """One ``uint8`` buffer; every planned storage is a typed view at its offset.

    >>> arena = Arena(64)
    >>> v = arena.view(16, torch.float32, (2, 3), (0, 1))
    >>> v.shape, v.stride(), v.storage_offset()
    (torch.Size([2, 3]), (3, 1), 4)
    """

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        try:
            self.bytes = torch.zeros(max(nbytes, 16), dtype=torch.uint8)
        except (RuntimeError, MemoryError) as error:
            raise PlanError(
                f"runtime: cannot allocate the {nbytes:,} B ({nbytes / 2**30:.1f} GiB) arena: "
                f"{str(error).splitlines()[0]}; dynamic dims are planned at their upper bounds: "
                "lower the Dim maxima, or free memory") from None
        self._typed: dict[torch.dtype, torch.Tensor] = {}

    def _typed_view(self, dtype: torch.dtype) -> torch.Tensor:
        typed = self._typed.get(dtype)
        if typed is None:
            usable = self.bytes.numel() - self.bytes.numel() % dtype.itemsize
            typed = self.bytes[:usable].view(dtype)
            self._typed[dtype] = typed
        return typed

    def view(self, offset: int, dtype: torch.dtype, shape: Sequence[int],
             dim_order: Sequence[int]) -> torch.Tensor:
        """A dense tensor of ``shape`` laid out in ``dim_order`` starting at byte ``offset``."""
        return self.strided(offset, dtype, shape, dense_strides(shape, dim_order))

    def strided(self, offset: int, dtype: torch.dtype, shape: Sequence[int],
                strides: Sequence[int]) -> torch.Tensor:
        """A tensor of ``shape`` with element ``strides`` whose first element is at byte
        ``offset`` (a slice of a concatenation planned in place)."""
        itemsize = dtype.itemsize
        if offset % itemsize:
            raise PlanError(f"runtime: offset {offset} is not a multiple of {itemsize} bytes "
                            f"({dtype}); compile with alignment >= {itemsize}")
        return self._typed_view(dtype).as_strided(tuple(shape), tuple(strides),
                                                  offset // itemsize)
