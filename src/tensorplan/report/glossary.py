"""What each term of the reports means, said once: the page shows the line as the tooltip of
each figure and in its glossary, the terminal tables in their captions.

>>> define("lower bound").startswith("the most bytes live at one step")
True
>>> caption(("alignment",))
'alignment: every offset is a multiple of it, and every size is rounded up to it'
"""

from __future__ import annotations

from collections.abc import Iterable

from tensorplan.errors import InternalError

GLOSSARY = {  # term (as the reports label it) -> what it means, in one line
    "arena": "the one block of memory a run's tensors live in, reused as they die: its size "
             "is what the plan costs",
    "arena at the upper bounds": "the arena a run at the largest sizes of the dynamic dims "
                                 "needs: what the program reserves",
    "lower bound": "the most bytes live at one step of this schedule (its order, in-place "
                   "reuse and folding): no placement can be smaller",
    "ratio": "arena / lower bound: 1.000 means no placement of this schedule is smaller",
    "baseline bound": "the lower bound of the program as exported: its own node order, one "
                      "buffer per value, nothing folded or reused; the arena's share of it is "
                      "what the schedule saved",
    "order": "the node order the plan follows: exported, or the memory-aware one chosen",
    "constants": "bytes of the weights and constants the runs read, outside the arena",
    "inputs outside": "bytes of the inputs' own buffer, right after the arena and not counted "
                      "in it (compile(inputs_in_arena=False), as a camera's frame buffer)",
    "algorithm": "the planner that placed the storages",
    "optimal": "whether the planner proved that no placement of these storages is smaller",
    "alignment": "every offset is a multiple of it, and every size is rounded up to it",
    "storages": "blocks of the arena, by what they hold: a value, or several that share memory "
                "(views, an output written over a dying input)",
    "regions": "control-flow ops (cond, while_loop, map, scan), each holding its subgraphs' "
               "storages in one block of the arena (0: the program has none)",
    "peak step": "the step with the most bytes live",
    "step": "one node of the top-level schedule, in run order; the first steps are the "
            "program's placeholders (inputs, weights, buffers), where nothing runs",
    "sizes": "the sizes of the dynamic dims every figure is shown at",
    "patched": "the high-resolution first layers run patch by patch: the split value is made "
               "in a grid of tiles and concatenated, so the whole maps before it never exist",
    "chunked": "each region (a layer's attention, its MLP) runs as a loop, once per chunk of "
               "token rows, its split value stacked from the chunks",
    "split": "the value a patched prefix ends at: it is made tile by tile, the layers after "
             "it run on it whole",
    "grid": "patch rows x columns of the split value",
    "cut from": "the value every patch is cut from: the input image, or its int8 copy made "
                "whole before the patches",
    "multiply-adds": "the convolutions' or matmuls' multiply-adds over the program's as "
                     "exported: what the halos of patches or the steps of chunks add",
    "chunks": "how many pieces of token rows each region runs in (as exported: one)",
    "estimated peak": "the bytes live at the busiest step, estimated from the rewrite's "
                      "regions before any candidate is planned",
    "kept": "the candidate compiled: the smallest arena within the multiply-add budget",
    "buffers": "the rows of the instance, each a size live over [lower, upper)",
    "peak": "the bytes the placement needs: the highest end (offset + size) of any buffer",
    "gap": "how far the peak is above the lower bound",
    "bank": "a memory of its own (SRAM, DRAM), planned as an arena of its own",
    "capacity": "the most bytes the bank holds (unbounded: no limit)",
    "traffic": "bytes the bank's storages and constants move per run: what their producers "
               "write and each reader reads",
    "share": "the bank's part of all the bytes the banks move per run",
    "cost": "traffic x the bank's price per byte; the banks' sum is what the bank choice "
            "minimises",
}


def define(term: str) -> str:
    """The line that says what ``term`` means; ``InternalError`` for a term without one (every
    label a report shows has a line here)."""
    try:
        return GLOSSARY[term]
    except KeyError:
        raise InternalError(f"no glossary line for {term!r}", "report") from None


def caption(terms: Iterable[str]) -> str:
    """``term: definition`` for each term, one per line (a table's caption)."""
    return "\n".join(f"{term}: {define(term)}" for term in terms)
