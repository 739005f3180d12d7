"""A control-flow body's arena placed as a region of its parent's, live only where it runs.

ExecuTorch plans each ``cond`` / ``while_loop`` / ``map`` / ``scan`` body before its parent
(``apply_algo``) and, by default, reserves the largest body's arena as a prefix of the parent's
for the whole method, so a chunked layer's body costs its bytes beside the layers that do not
run it. ExecuTorch's own planning interface allows the other reading (a submodule's
``non_const_buffer_sizes`` reserved "for the lifetime of the submodule node"): here each body's
arena is a buffer of its parent's plan, live at its node's step only, and the body's specs
(those of bodies nested in it included) move to that buffer's offset. The emitter reads each
spec's ``mem_offset``; a body's bytes are only used while its node runs.

Worked example: a layer's ``scan`` at step 40 whose body needs 1.5 MB: a 1.5 MB buffer live at
step 40 in the parent's plan, placed where no value live at step 40 lies (over the scores of an
earlier layer, say, at offset 3 MB); each spec of the body is then at 3 MB + its own offset.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch.fx
from torch.utils import _pytree as pytree

from tensorplan.ops.control_flow import control_flow_op
from tensorplan.plan.planners import Buffer

OFFSET_KEY = "tensorplan_region_offset"  # a body module's meta: its arena's offset in its parent's


@dataclass(frozen=True)
class BodyRegion:
    """The bodies of one control-flow node, to plan as one buffer of their parent's arena."""

    bodies: tuple[torch.fx.GraphModule, ...]  # the node's bodies (a cond's two branches)
    buffer: Buffer  # the largest body's bytes, live at the node's step only


class PlacedRegion(NamedTuple):
    """A region of a graph's arena its bodies were placed in, for the verifier (a tuple: it
    unpacks as ``node, size, step, offset``)."""

    node: str  # name of the control-flow node whose bodies the region holds
    size: int  # bytes of its largest body's arena
    step: int  # the node's step, the only one where the region is live
    offset: int  # byte offset of the region in the parent's arena


def body_regions(graph_module: Any, mem_id: int) -> list[BodyRegion]:
    """The control-flow bodies of the graph already planned in arena ``mem_id`` alone, per
    node (a ``cond``'s two branches never run together: they share one region), as a buffer
    of the largest one's size live at the node's step (ExecuTorch's lifetimes count nodes in
    graph order); [] when a body is planned in other arenas too (memory banks: kept as a
    prefix) or for a graph without nodes."""
    found: list[BodyRegion] = []
    if not isinstance(graph_module, torch.fx.GraphModule):
        return found
    for step, node in enumerate(graph_module.graph.nodes):
        described = control_flow_op(node)
        bodies = tuple(getattr(graph_module, sub.target)
                       for sub in (described.subgraph_nodes(node) if described else ()))
        sizes = [list(body.meta.get("non_const_buffer_sizes") or []) for body in bodies]
        if any(size for each in sizes for i, size in enumerate(each) if i not in (0, mem_id)):
            return []
        largest = max((each[mem_id] for each in sizes if len(each) > mem_id), default=0)
        if largest:
            found.append(BodyRegion(bodies, Buffer(largest, step, step + 1)))
    return found


def place_bodies(regions: Sequence[BodyRegion], offsets: Sequence[int]) -> None:
    """Move every planned spec of each region's bodies (and of the bodies inside them) by
    the region's offset, and record the offset on each body (``OFFSET_KEY``)."""
    for region, offset in zip(regions, offsets, strict=True):
        for body in region.bodies:
            body.meta[OFFSET_KEY] = offset
            for spec in _offset_specs(body):
                spec.mem_offset += offset


def _offset_specs(body: torch.fx.GraphModule) -> Iterator[Any]:
    """Each spec with an offset in the body and the bodies inside it, once; not a view's
    spec (ExecuTorch's ``ViewSpec``, whose offset is its base's: moving it would move the
    base twice)."""
    from tensorplan.integrations.executorch.private import viewed_spec

    seen: set[int] = set()
    for module in body.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            for spec in pytree.tree_leaves(node.meta.get("spec")):
                if getattr(spec, "mem_offset", None) is not None and id(spec) not in seen \
                        and viewed_spec(spec) is None:
                    seen.add(id(spec))
                    yield spec


def placed_regions(graph_module: torch.fx.GraphModule, mem_id: int) -> list[PlacedRegion]:
    """The regions of this graph's arena ``mem_id`` its bodies were placed in, one per node,
    for the verifier."""
    found: list[PlacedRegion] = []
    for step, node in enumerate(graph_module.graph.nodes):
        described = control_flow_op(node)
        bodies = [getattr(graph_module, sub.target)
                  for sub in (described.subgraph_nodes(node) if described else ())]
        placed = [body.meta for body in bodies if OFFSET_KEY in body.meta]
        if placed:
            size = max(meta["non_const_buffer_sizes"][mem_id] for meta in placed)
            found.append(PlacedRegion(node.name, size, step, placed[0][OFFSET_KEY]))
    return found
