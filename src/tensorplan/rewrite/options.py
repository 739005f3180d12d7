"""The rewrites ``tp.compile`` tries before it plans: patches and chunks (``compile(patches=,
max_overhead=, chunks=)``), as the rewrite stage reads them."""

from __future__ import annotations

from dataclasses import dataclass

MAX_PATCH_OVERHEAD = 1.25  # patches' default multiply-add budget (``compile(max_overhead=)``)


@dataclass(frozen=True)
class RewriteOptions:
    """Which rewrites run before planning; the defaults run the program as exported."""

    patches: str | tuple[int, int] | None = None  # None, "auto" or a (rows, cols) grid
    max_overhead: float = MAX_PATCH_OVERHEAD      # patches' multiply-adds over the program's
    chunks: str | int | None = None               # None, "auto" or a number of chunks
