"""One note per rewrite a program went through (patches, chunks), for the page and picture."""

from __future__ import annotations

from dataclasses import dataclass

from tensorplan.analysis.liveness import scheduled_nodes
from tensorplan.program import Program
from tensorplan.report.text import bytes_text
from tensorplan.rewrite.chunk_emit import loop_of
from tensorplan.rewrite.region import Region

LISTED_REGIONS = 4  # regions named in a chunking's note; the rest counted


@dataclass(frozen=True)
class Note:
    """What a rewrite did: a label ("patched", "chunked"), a short line and the details."""

    label: str
    summary: str  # what was kept, in a few words (the picture's title line)
    detail: str  # where, and the greedy arenas as exported and rewritten (the page)
    spans: tuple[tuple[int, int], ...] = ()  # the top-level steps ``[start, end)`` it runs
    #                                          over (chunked: each region's chunks and cat)


def rewrite_notes(program: Program) -> list[Note]:
    """A note for each rewrite asked for: what was kept and where, with the greedy plans'
    arenas as exported and rewritten, or why the program runs as exported."""
    notes = []
    patching = program.patching
    if patching is not None:
        chosen, base = patching.chosen, patching.candidates[0]
        if chosen.split:
            rows, cols = chosen.grid
            notes.append(Note("patched", f"patched {rows}x{cols} up to {chosen.split}",
                              f"greedy arena {bytes_text(base.arena_bytes)} as exported, "
                              f"{bytes_text(chosen.arena_bytes)} patched; multiply-adds "
                              f"{chosen.overhead:.2f}x"))
        else:
            notes.append(Note("patched", "not patched",
                              "no patching planned smaller than the program as exported"))
    chunking = program.chunking
    if chunking is not None:
        chosen, base = chunking.chosen, chunking.candidates[0]
        if chosen.chunks > 1:
            counts = chosen.per_region
            where = "; ".join(f"{r.split} ({_rows(r)} rows of dim {r.dim} in {n} chunks, "
                              f"largest inside {r.largest}: {bytes_text(r.largest_bytes)} "
                              f"whole)"
                              for r, n in zip(chunking.regions[:LISTED_REGIONS], counts,
                                              strict=False))
            more = len(chunking.regions) - LISTED_REGIONS
            where += f"; and {more} more" if more > 0 else ""
            fewest = min(counts)
            spread = f"{fewest} to {chosen.chunks}" if fewest < chosen.chunks \
                else str(chosen.chunks)
            notes.append(Note("chunked", f"chunked: {len(chunking.regions)} regions in "
                                         f"{spread} chunks of rows",
                              f"{where}. Greedy arena {bytes_text(base.arena_bytes)} as "
                              f"exported, {bytes_text(chosen.arena_bytes)} chunked",
                              chunk_spans(program)))
        else:
            notes.append(Note("chunked", "not chunked", chunking.declined))
    return notes


def chunk_spans(program: Program) -> tuple[tuple[int, int], ...]:
    """The steps ``[start, end)`` of the program's schedule each chunked region runs over:
    from the first node its loop made that runs (not folded: the rows cut and padded for it)
    to the split, in the order of ``chunking.regions`` (steps as the plan's lifetimes count
    them: placeholders first)."""
    if program.chunking is None or program.chunking.chosen.chunks == 1:
        return ()
    graph = program.exported_program.graph
    order = program.schedule.order if program.schedule else None
    step = {node.name: i for i, node in enumerate(scheduled_nodes(graph, order))}
    splits = {r.split for r in program.chunking.regions}
    folded = program.schedule.folded.computed if program.schedule else frozenset()
    first: dict[str, int] = {}
    for name, at in step.items():
        split = None if name in folded else loop_of(name)
        if split in splits:
            first[split] = min(first.get(split, at), at)
    return tuple((first[r.split], step[r.split] + 1) for r in program.chunking.regions
                 if r.split in first and r.split in step)


def _rows(region: Region) -> str:
    """A region's rows: their count, or with a dynamic dim their size and bound."""
    if region.symbolic is None:
        return str(region.extent)
    return f"{region.symbolic}, at most {region.extent},"
