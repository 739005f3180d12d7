"""The chunked program (``chunks.py`` chooses the regions and counts): each region run as a
loop (``loop.py``) whose body is the region on one chunk, each chunk written into its rows of
the split, built node by node (``rebuild.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from tensorplan.errors import InputError
from tensorplan.ops.control_flow import graph_modules
from tensorplan.rewrite.chunk_regions import at_bounds, probe_points
from tensorplan.rewrite.grouped import Grouped, HeadsOnce, found_groups
from tensorplan.rewrite.loop import LOOP_TAG, Loop
from tensorplan.rewrite.parts import is_view_value
from tensorplan.rewrite.rebuild import Rebuild
from tensorplan.rewrite.region import Region


def loop_of(name: str) -> str | None:
    """The split a chunked program's node ``name`` was made for by its region's loop
    (``add_5_loop_scan`` -> ``add_5``), or None for a node no loop made."""
    base, tag, _ = name.rpartition(f"{LOOP_TAG}_")
    return base if tag and base else None


@at_bounds
def chunk_program(program: ExportedProgram, found: Sequence[Region],
                  counts: Sequence[int], grouped: bool = False) -> ExportedProgram:
    """The program with each region run as a loop (``loop.py``) over at most ``counts[i]``
    chunks of at most ``ceil(rows / counts[i])`` rows of ``found[i]``'s split (its rows at the
    dims' upper bounds), as many chunks as the rows need at each size, each chunk's result
    written into its rows of the split; every other node as it was. The loop's body is the
    region on one chunk, planned once. With ``grouped``, a product of a loop's body that reads
    repeated KV heads made before the loop (``grouped.py``) reads them unrepeated: the repeat
    is never made, the loop is passed the KV heads. Built from the program's graph without a
    second trace (``rebuild.py``): the values of the new nodes are computed on the program's
    fake tensors. Call it within ``sizes_at`` the dims' upper bounds.

    Pure: ``program`` is not modified, but for its dims' hints (the sizes a trace branches
    on, ``_generic_hints``). Raises ``InputError`` for a count below 1 or above a region's
    rows, or for a value a loop cannot cut into chunks.
    """
    for region, count in zip(found, counts, strict=True):
        if not 1 <= count <= region.extent:
            raise InputError(f"chunks: {count} chunks do not fit the {region.extent} rows of "
                             f"{region.split!r} (dim {region.dim}); choose 1 to "
                             f"{region.extent}")
    chunked = {r.split: (r, n) for r, n in zip(found, counts, strict=True) if n > 1}
    inside = {name for r, _ in chunked.values() for name in (*r.nodes[:-1], *r.checks)}
    build = Rebuild(program)
    nodes = {n.name: n for n in program.graph.nodes}
    if any(r.symbolic is not None for r, _ in chunked.values()):
        _generic_hints(program, build.fake_mode.shape_env)
    chains = _grouped_in_loops(program, inside) if grouped else {}
    heads = HeadsOnce(build, chains)
    groups = {chain.product.name: chain.repeat.group for chain in chains.values()}
    for node in program.graph.nodes:
        if node.name in chunked:
            region, count = chunked[node.name]
            build.env[node.name] = Loop(build, nodes, region,
                                        math.ceil(region.extent / count), groups).emit()
        elif node.name not in inside and not heads.emitted(node):
            build.copy(node)
    for node in reversed(build.graph.nodes):  # a weight's view each loop's body takes itself
        if node.op == "call_function" and not node.users and is_view_value(node):
            build.graph.erase_node(node)
    return build.program()


def _grouped_in_loops(program: ExportedProgram, inside: set[str]) -> dict[str, Grouped]:
    """The grouped products (``grouped.py``) a loop's body makes whose repeat and ops before
    the product are all made before the loop."""
    return {name: chain for name, chain in found_groups(program).items()
            if chain.product.name in inside
            and not any(step.name in inside for step, _ in chain.steps)}


def _generic_hints(program: ExportedProgram, shape_env: Any) -> None:
    """Move the dims' hints (the example's sizes, which a trace of the program branches on)
    to a size inside their range that is no multiple of a chunk (``_probe``'s prime), as if
    the program had been exported at that size: at the example a loop may run one chunk or pad
    no rows, and a trace (this rewrite's, ExecuTorch's) would take that for every size (a view
    of one chunk, a padding dropped). Only the hints change, on the ShapeEnv and on every
    symbolic size of the program's values: every value, size and range stays as exported."""
    points = probe_points(program)
    if isinstance(points, str):
        return
    _, probe = points
    for symbol, value in probe.items():
        if symbol in shape_env.backed_var_to_val:
            shape_env.backed_var_to_val[symbol] = sympy.Integer(value)
    for module, _ in graph_modules(program.graph_module):
        for node in module.graph.nodes:
            for leaf in pytree.tree_leaves(node.meta.get("val")):
                sizes = (*leaf.shape, *leaf.stride(), leaf.storage_offset()) \
                    if isinstance(leaf, torch.Tensor) else (leaf,)
                for size in sizes:
                    hint = shape_env._maybe_evaluate_static(size.node.expr, compute_hint=True) \
                        if isinstance(size, torch.SymInt) else None
                    if hint is not None:
                        size.node._hint = int(hint)
