"""Terminal tables (rich) of what ``compile(..., chunks=...)`` tried and left whole."""

from __future__ import annotations

from rich.table import Table

from tensorplan.report.glossary import caption
from tensorplan.report.text import bytes_text
from tensorplan.rewrite.chunks import Chunking


def chunking_table(chunking: Chunking) -> Table:
    """One row per chunk count: the estimated peak, the planned arena where it was planned,
    the multiply-add overhead, and which one was kept; the caption says why nothing was
    chunked when nothing was, and how many regions were found."""
    terms = caption(("chunks", "estimated peak", "multiply-adds", "kept"))
    table = Table(title=f"chunk counts ({len(chunking.regions)} regions of token rows; "
                        f"multiply-adds within {chunking.max_overhead:.2f}x)",
                  caption=f"{chunking.declined}\n{terms}" if chunking.declined else terms,
                  caption_justify="left")
    for column in ("chunks", "estimated peak", "arena", "multiply-adds", "kept"):
        table.add_column(column, justify="left" if column == "kept" else "right")
    for candidate in chunking.candidates:
        arena = "-" if candidate.arena_bytes is None else bytes_text(candidate.arena_bytes)
        overhead = "-" if candidate.overhead is None else f"{candidate.overhead:.2f}x"
        table.add_row("as exported" if candidate.chunks == 1 else str(candidate.chunks),
                      bytes_text(candidate.estimate_bytes), arena, overhead,
                      "yes" if candidate == chunking.chosen else "")
    return table


def whole_table(chunking: Chunking) -> Table:
    """The largest values left whole, each with the reason it is not made by chunks."""
    table = Table(title="largest values left whole")
    table.add_column("value")
    table.add_column("bytes", justify="right")
    table.add_column("why")
    for whole in chunking.whole:
        table.add_row(whole.value, bytes_text(whole.nbytes), whole.reason)
    return table
