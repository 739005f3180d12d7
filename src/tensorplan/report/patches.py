"""Terminal table (rich) of the patchings ``compile(..., patches=...)`` tried."""

from __future__ import annotations

from rich.table import Table

from tensorplan.report.glossary import caption
from tensorplan.report.text import bytes_text
from tensorplan.rewrite.patches import Patching


def patching_table(patching: Patching) -> Table:
    """One row per candidate: split value, the value its patches are cut from, grid, arena
    (tensorplan's greedy), multiply-add overhead, and which one was kept; the caption says why
    none was tried, when none was, and where the patches end."""
    terms = caption(("split", "cut from", "grid", "multiply-adds", "kept"))
    table = Table(title=f"patch-by-patch candidates (multiply-adds within "
                        f"{patching.max_overhead:.2f}x)",
                  caption="\n".join(t for t in (patching.declined, patching.stopped, terms)
                                    if t),
                  caption_justify="left")
    for column in ("split", "cut from", "grid", "arena", "multiply-adds", "kept"):
        table.add_column(column, justify="right" if column in ("arena", "multiply-adds")
                         else "left")
    for candidate in patching.candidates:
        table.add_row(candidate.split or "(as exported)", candidate.source,
                      f"{candidate.grid[0]}x{candidate.grid[1]}",
                      bytes_text(candidate.arena_bytes), f"{candidate.overhead:.2f}x",
                      "yes" if candidate == patching.chosen else "")
    return table
