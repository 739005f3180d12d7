"""Folding that pays for itself, on an edge program (tensorplan's candidate folding).

ExecuTorch's constant propagation folds every value computable from constants. That removes
those values from the arena (a weight's transpose, computed at every call otherwise), but can
grow the constants by more than the arena shrinks: a float mask is four times its boolean
source, a relative-position bias many times its bucket table. :func:`choose_folds` folds a value
only when the constants it adds are paid for by constants it makes dead or by arena bytes it
takes off the plan's busiest step.

Greedy, in graph order over the constant-computable values: fold a value with every
constant-computable value it depends on when the growth of the program's constant bytes is at
most the bytes those values hold at the peak (``at_peak``, from a plan without folding; credit
once used is spent). A value need not be read by a runtime value: folding a shared table (a
rotary ``cos``) leaves the per-layer copies made from it at run time, so the cut is wherever
the constants are cheapest. A folded value becomes a
constant placeholder when something not folded reads it; a parameter or computed constant all of
whose readers are folded is dropped. Worked example: ``w`` read only by ``permute_copy(w)``
folds (``w``, 64 KB, is replaced by its transpose, 64 KB); a tied embedding table also read by
``embedding`` folds its transpose (a second copy) only when that transpose sits at the peak.
A value that does not pay alone is tried with its family (``_family``): ``w`` read by three
``slice_copy`` of its column parts folds as the three parts, ``w`` dropped, the constants the
same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree


def _bytes(value: Any) -> int:
    return sum(leaf.numel() * leaf.element_size() for leaf in pytree.tree_leaves(value)
               if isinstance(leaf, torch.Tensor))


def constant_bytes(known: Mapping[torch.fx.Node, Any], folded: set[torch.fx.Node]) -> int:
    """Constant bytes of the program when the placeholders and ``folded`` values are in the
    table: each one with a reader outside that set is kept."""
    kept = [n for n in known if n.op == "placeholder" or n in folded]
    inside = set(kept)
    return sum(_bytes(known[n]) for n in kept if any(u not in inside for u in n.users))


def _cone(node: torch.fx.Node, known: Mapping[torch.fx.Node, Any]) -> set[torch.fx.Node]:
    """``node`` and every computed (non-placeholder) constant value it depends on."""
    found, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current in found or current.op == "placeholder" or current not in known:
            continue
        found.add(current)
        stack += current.all_input_nodes
    return found


def frontier(known: Mapping[torch.fx.Node, Any]) -> list[torch.fx.Node]:
    """The computed constant values a runtime value reads: what constant propagation turns
    into constants (``known`` as in :func:`choose_folds`)."""
    return [n for n in known if n.op != "placeholder" and any(u not in known for u in n.users)]


def choose_folds(known: Mapping[torch.fx.Node, Any],
                 at_peak: Mapping[str, int] | None = None) -> set[torch.fx.Node]:
    """The computed constant values to fold (see the module docstring); ``known`` maps every
    constant placeholder and constant-computable node to its value, in graph order;
    ``at_peak`` maps node names to the arena bytes they hold at the plan's busiest step."""
    credit = dict(at_peak or {})
    folded: set[torch.fx.Node] = set()
    current = constant_bytes(known, folded)
    for node in [n for n in known if n.op != "placeholder"]:
        if node in folded:
            continue
        for cone in (_cone(node, known), _family(node, known)):
            trial = folded | cone
            size = constant_bytes(known, trial)
            if size - current <= sum(credit.get(n.name, 0) for n in cone):
                folded, current = trial, size
                for n in cone:
                    credit.pop(n.name, None)
                break
    return folded


def _family(node: torch.fx.Node, known: Mapping[torch.fx.Node, Any]) -> set[torch.fx.Node]:
    """``node``'s cone and the cones of every other reader of the constants it reads, when
    every reader of those is computable from constants: folded together, the constants they
    read are dropped (a weight read only through views of its column parts)."""
    cone = _cone(node, known)
    sources = {n for c in cone for n in c.all_input_nodes if n.op == "placeholder"}
    readers = {u for s in sources for u in s.users}
    if not readers <= set(known):
        return cone
    return cone.union(*(_cone(r, known) for r in readers))


def foldable_values(exported_program: Any) -> dict[torch.fx.Node, Any]:
    """Every constant placeholder and constant-computable node with its value (ExecuTorch's
    own propagation, its default skip list: the values its constant propagation would fold)."""
    from executorch.exir.passes.constant_prop_pass import get_propagated_const_tensor_dict

    return dict(get_propagated_const_tensor_dict(exported_program, None))


def apply_folds(exported_program: Any, names: set[str]) -> int:
    """Fold, in place, the constant-computable values named ``names``; return how many.

    The rewrite is ExecuTorch's own (its constant placeholders and input specs), given the
    chosen values instead of all of them.
    """
    known = foldable_values(exported_program)
    folded = {n for n in known if n.op != "placeholder" and n.name in names}
    if not folded:
        return 0
    fold_table(exported_program, {n: v for n, v in known.items()
                                  if n.op == "placeholder" or n in folded})
    return len(folded)


def fold_table(exported_program: Any, table: Mapping[torch.fx.Node, torch.Tensor]) -> None:
    """Make each computed node of ``table`` (node -> its value, in graph order) a constant
    placeholder, in place, with ExecuTorch's own rewrite (its lifted constants and input
    specs); a constant placeholder of ``table`` whose every reader is in it is dropped."""
    from executorch.exir.passes.constant_prop_pass import create_constant_nodes_and_return_specs

    from tensorplan.integrations.executorch.private import update_output_node_and_specs

    specs = {s.arg.name: s for s in exported_program.graph_signature.input_specs}
    specs.update(create_constant_nodes_and_return_specs(table, exported_program))
    exported_program.graph_signature.input_specs = [
        specs[n.name] for n in exported_program.graph.find_nodes(op="placeholder")]
    update_output_node_and_specs(exported_program, _skip_dim_order=True)
    exported_program.graph.eliminate_dead_code()
    exported_program.graph_module.recompile()
