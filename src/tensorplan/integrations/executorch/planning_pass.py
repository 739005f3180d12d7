"""ExecuTorch's memory planning pass, with tensorplan's order, reuse and planner.

:class:`TensorplanPlanningPass` replaces ``ExecutorchBackendConfig.memory_planning_pass``. It runs
where ExecuTorch's own pass runs (last, on the out-variant graph, before the emitter) and, for
each method's graph:

1. tries the node orders of :mod:`.order`; for each it finds the links of :mod:`.links`
   (in-place reuse over measured kernels, inputs of a ``cat`` made in their slices, a pad's
   input in the tail of its output) and plans the graph's specs with tensorplan's greedy,
   keeping the order with the smallest arena (the exported order on a tie);
2. rearranges the graph into that order (the emitter writes the instructions in graph order),
   writes the links onto the specs (``storage_base``), makes the same links inside control-flow
   subgraphs, and plans every graph with the requested ``algorithm`` through ExecuTorch's
   ``apply_algo`` (subgraphs first, their arenas reserved at the front of their parent's);
3. verifies the result twice: with tensorplan's independent checker (no two live storages share
   bytes, offsets aligned, each linked spec inside its base) and with ExecuTorch's own storage
   verifier (or leaves ExecuTorch's to the caller: ``lower`` runs it on the candidate it
   keeps), and records a :class:`GraphPlan` per method in ``plans``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch.fx
from executorch.exir import memory
from executorch.exir.memory_planning import (
    Verifier,
    apply_algo,
    collect_specs_from_nodes,
    update_all_tensors_lifetime,
)
from executorch.exir.pass_base import PassResult
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.tensor import TensorSpec, contiguous_stride_from_shape
from torch.export.graph_signature import ExportGraphSignature
from torch.utils import _pytree as pytree

from tensorplan.errors import PlanError
from tensorplan.integrations.executorch import kernels
from tensorplan.integrations.executorch.algo import DEFAULT_MEM_ID, tensorplan_memory_planning
from tensorplan.integrations.executorch.banks import BankSetup, bank_arenas
from tensorplan.integrations.executorch.bodies import placed_regions
from tensorplan.integrations.executorch.links import Link, LinkRules, apply_links, find_links
from tensorplan.integrations.executorch.moves import Copy, plan_copies, undo_copies
from tensorplan.integrations.executorch.order import apply_order, candidate_orders
from tensorplan.integrations.executorch.private import (
    ViewSpec,
    alias_inplace_result_specs,
    check_default_mem_ids,
    insert_mutable_buffer_specs,
    is_inplace_node,
    viewed_spec,
)
from tensorplan.integrations.executorch.reuse_check import verify_storage_reuse
from tensorplan.integrations.executorch.vocabulary import (
    is_contiguous,
    loop_operands,
    mark_bound_inputs,
)
from tensorplan.plan.planners import Buffer, plan_buffers
from tensorplan.plan.planners.problem import lower_bound
from tensorplan.plan.validate import find_violations, plan_error
from tensorplan.specs.bounds import upper_bound


@dataclass(frozen=True)
class PassOptions:
    """What the pass may do (``to_executorch``'s keyword arguments)."""

    reuse: bool = True  # in-place reuse and concatenation in place
    reorder: bool = True  # try other node orders
    algorithm: str = "auto"  # tensorplan planner for the final plan
    overlap_safe: Mapping[str, frozenset[str]] | None = None  # None: kernels.overlap_safe()
    concat: bool | None = None  # None: kernels.cat_in_slices()
    banks: BankSetup | None = None  # memory banks, one mem_id each (banks.py here); None: one arena
    # False: ExecuTorch's storage verifier (quadratic in the specs) is left to the caller's
    # ``verify``, so a candidate lowering that is not kept is checked by tensorplan's alone
    executorch_verifier_now: bool = True


class Step(NamedTuple):
    """What one technique gave (a tuple: it unpacks as ``technique, arena_bytes``)."""

    technique: str  # the technique added to the steps before it (or the first step)
    arena_bytes: int  # the method's arena with tensorplan's greedy, with that technique


class PeakValue(NamedTuple):
    """A planned storage live at a method's busiest step (a tuple: ``dict`` of several maps
    node -> bytes)."""

    node: str  # name of the node whose output or placeholder the storage is
    nbytes: int  # the storage's bytes


class HeldValue(NamedTuple):
    """A value a planned storage holds (a tuple: it unpacks as ``node, first, last``)."""

    node: str  # name of the node that makes the value (its out-variant op, or a placeholder)
    first: int  # first step the value is live
    last: int  # last step the value is live (inclusive, as ExecuTorch's lifetimes)


class PlannedStorage(NamedTuple):
    """A planned storage of a method (a tuple: it unpacks as ``values, nbytes``)."""

    values: tuple[HeldValue, ...]  # every value it holds, its own first
    nbytes: int  # the storage's bytes


@dataclass(frozen=True)
class GraphPlan:
    """The plan of one method's graph, as written into the program."""

    arena_bytes: int  # planned bytes of the method (every arena but constants)
    lower_bound_bytes: int  # no plan of this graph's order and links needs fewer
    order: str  # the node order kept ("exported", "memory-greedy", "depth-first")
    in_place: int  # outputs written over a dying argument
    concat: int  # cat inputs made in their slices of the output, pad inputs in its tail
    steps: tuple[Step, ...]  # each technique added in turn, with what it gave
    peak_values: tuple[PeakValue, ...]  # the storages live at the busiest step, largest first
    load: tuple[int, ...] = ()  # bytes of the planned storages live at each step
    storages: tuple[PlannedStorage, ...] = ()  # every planned storage, with its values
    bank_arenas: tuple[int, ...] = ()  # with banks: each bank's arena (mem_id 1, 2, ...)
    traffic_cost: float = 0.0          # with banks: bytes moved x their bank's cost
    traffic_cost_bound: float = 0.0    # with banks: no assignment that fits costs less
    bank_copies: int = 0               # with banks: values copied once to another bank


class _Tried(NamedTuple):
    """What one trial tries: a node order and kinds of link."""

    step: str  # what the trial adds, as ``GraphPlan.steps`` names it
    order: str  # the node order ("exported" or a name of ``order.candidate_orders``)
    kinds: tuple[str, ...]  # the kinds of link looked for (``_ALL_LINKS`` or fewer)
    nodes: list[torch.fx.Node]  # the graph's nodes in that order


@dataclass(frozen=True)
class _Trial:
    """One node order and kinds of link, planned with tensorplan's greedy."""

    tried: _Tried  # the order and the kinds of link it tries
    links: list[Link]  # the links found
    arena: int  # the greedy's arena, in bytes
    bound: int  # no plan of this order and these links needs fewer bytes


_ALL_LINKS = ("in-place", "concat")  # every kind of link the options may allow
_EXPORTED_STEPS = (  # the exported order, each technique added in turn (``GraphPlan.steps``)
    ("tensorplan planner (exported order, no links)", ()),
    ("+ in-place reuse", ("in-place",)),
    ("+ concatenation in place", _ALL_LINKS))


def _kept_first(trial: _Trial) -> tuple[int, bool]:
    """The key of the trial kept, smallest first: its arena, then whether it looked for fewer
    kinds of link than ``_ALL_LINKS``. A trial with fewer kinds measures what one technique
    gives (``GraphPlan.steps``) and is kept only when strictly smaller; of equal keys ``min``
    keeps the first trial (the exported order, then ``order.candidate_orders``' order)."""
    return trial.arena, trial.tried.kinds != _ALL_LINKS


class TensorplanPlanningPass(MemoryPlanningPass):
    """ExecuTorch's ``MemoryPlanningPass`` with tensorplan's order, links and planner.

    Accepts the same allocation options as ExecuTorch's pass (graph inputs, outputs and
    mutable buffers planned or not, alignment, shared mutable buffers across methods).
    """

    def __init__(self, options: PassOptions = PassOptions(), **executorch_options: Any) -> None:
        super().__init__(memory_planning_algo=tensorplan_memory_planning(
            options.algorithm, banks=options.banks), **executorch_options)
        self.options = options
        self.plans: list[GraphPlan] = []

    def run(self, graph_module: torch.fx.GraphModule,
            graph_signature: Any = None) -> PassResult:
        """Order, link, plan and verify one method's graph (see the module docstring)."""
        if isinstance(graph_signature, ExportGraphSignature):
            graph_signature = _Signature(graph_signature.input_specs,
                                         graph_signature.output_specs)
        self._set_alloc_node_spec(graph_module)
        _tight_shapes(graph_module)
        _output_specs_of_its_values(graph_module)
        original = _storage_bases(graph_module)
        trials = self._trials(graph_module, graph_signature, original)
        best = min(trials, key=_kept_first)
        apply_order(graph_module, best.tried.nodes)
        _restore(original)
        apply_links(best.links)
        sub_links = self._subgraph_links(graph_module, graph_signature)
        copies = self._copies(graph_module, graph_signature)
        _reset_lifetimes(graph_module)
        given = {spec: spec.mem_id for module in graph_module.modules()
                 if isinstance(module, torch.fx.GraphModule) for spec in _all_specs(module)}
        copies, bufsizes = self._plan_banks(graph_module, graph_signature, copies, given)
        if self.share_mutable_buffers and graph_signature is not None:
            self.state.graph_modules.append(graph_module)
            check_default_mem_ids(graph_module)
            insert_mutable_buffer_specs(self.state, graph_module, graph_signature)
        self._verify(graph_module, graph_signature, bufsizes)
        _settle_loop_views(graph_module)
        prefix = sum(getattr(graph_module, "input_mem_buffer_sizes", None) or [])
        steps = tuple(Step(trial.tried.step, trial.arena + prefix) for trial in trials)
        live = _liveness(graph_module, graph_signature)
        self.plans.append(GraphPlan(
            arena_bytes=sum(bufsizes[1:]), lower_bound_bytes=prefix + best.bound,
            order=best.tried.order, in_place=sum(link.kind == "in-place" for link in best.links)
            + sum(link.kind == "in-place" for link in sub_links),
            concat=sum(link.kind in ("concat", "pad") for link in best.links + sub_links),
            steps=steps, peak_values=live.peak_values, load=live.load, storages=live.storages,
            **self._bank_figures(bufsizes, len(copies))))
        return PassResult(graph_module, True)

    def _apply_algo(self, graph_module: torch.fx.GraphModule, graph_signature: Any) -> list[int]:
        """ExecuTorch's ``apply_algo`` with this pass's algorithm and options: plans every
        graph (subgraphs first) and writes the specs' ``mem_id`` and offsets."""
        if self.options.banks is not None:
            self.options.banks.top = graph_module
        mark_bound_inputs(graph_module)
        return apply_algo(
            self.memory_planning_algo, graph_module, self.alignment, graph_signature,
            self.alloc_graph_input, self.alloc_graph_output,
            self.alloc_mutable_buffers and not self.share_mutable_buffers,
            self.enable_non_cpu_memory_planning)

    def _copies(self, graph_module: torch.fx.GraphModule, graph_signature: Any) -> list[Copy]:
        """With banks (and copies allowed): the copies between banks ``moves.plan_copies``
        chooses, inserted into the graph (none without banks, or in a graph with control
        flow, whose subgraphs' room in the banks is known only once they are planned)."""
        setup = self.options.banks
        if setup is None:
            return []
        setup.spec_pins.clear()
        setup.moves_bound = math.inf
        subgraphs = any(m is not graph_module and isinstance(m, torch.fx.GraphModule)
                        for m in graph_module.modules())
        if not setup.moves or subgraphs:
            return []
        _reset_lifetimes(graph_module)  # the last trial's lifetimes are still on the specs
        update_all_tensors_lifetime(graph_module, graph_signature)
        specs = [s for s in _planned_specs(graph_module, graph_signature, self.alloc_graph_input,
                                           self.alloc_graph_output, self.alloc_mutable_buffers)
                 if not s.const]
        for spec in specs:
            spec.realign(self.alignment)
        try:
            made = plan_copies(setup, graph_module, specs)
        except PlanError:  # no choice fits: the planning without copies says why
            made = []
        _reset_lifetimes(graph_module)
        return made

    def _plan_banks(self, graph_module: torch.fx.GraphModule, graph_signature: Any,
                    copies: list[Copy], given: Mapping[Any, Any]) -> tuple[list[Copy], list[int]]:
        """Plan every graph with ``copies`` inserted, or without them when that costs less:
        when the plan with copies does not fit once packed, or costs more than the choice
        promised (packing made a bank's room smaller); returns the copies kept and the
        arenas."""
        try:
            bufsizes = self._apply_algo(graph_module, graph_signature)
        except PlanError:
            if not copies:
                raise
            self._without_copies(graph_module, copies, given)
            return [], self._apply_algo(graph_module, graph_signature)
        setup = self.options.banks
        if not copies or setup.cost <= setup.moves_bound * (1 + 1e-9):
            return copies, bufsizes
        with_copies = setup.cost
        self._without_copies(graph_module, copies, given)
        bufsizes = self._apply_algo(graph_module, graph_signature)
        if setup.cost <= with_copies:
            return [], bufsizes
        for spec, mem_id in given.items():
            spec.mem_id = mem_id
        copies = self._copies(graph_module, graph_signature)
        return copies, self._apply_algo(graph_module, graph_signature)

    def _without_copies(self, graph_module: torch.fx.GraphModule, copies: list[Copy],
                        given: Mapping[Any, Any]) -> None:
        """The graph as it was before ``copies``, the specs' ``mem_id`` as ``given``, the
        copies' pins dropped: for a plan of the banks without copies. The bound of the choice
        with copies stays: it holds for every assignment, with copies or without."""
        undo_copies(graph_module, copies)
        self.options.banks.spec_pins.clear()
        for spec, mem_id in given.items():
            spec.mem_id = mem_id
        _reset_lifetimes(graph_module)

    def _bank_figures(self, bufsizes: list[int], copies: int) -> dict[str, Any]:
        """The method's bank arenas, traffic cost and copies between banks (none without
        banks)."""
        setup = self.options.banks
        if setup is None:
            return {}
        return {"bank_arenas": bank_arenas(setup, bufsizes), "traffic_cost": setup.cost,
                "traffic_cost_bound": setup.cost_bound, "bank_copies": copies}

    def _rules(self, graph_module: torch.fx.GraphModule, graph_signature: Any,
               inputs: bool, alloc_inputs: bool, kinds: tuple[str, ...]) -> LinkRules:
        options = self.options
        table = kernels.overlap_safe() if options.overlap_safe is None else options.overlap_safe
        concat = kernels.cat_in_slices() if options.concat is None else options.concat
        in_place = options.reuse and "in-place" in kinds
        return LinkRules(
            overlap_safe=table if in_place else {},
            byte_copies=kernels.byte_copies() if in_place else {},
            concat=concat and options.reuse and "concat" in kinds,
            pad=kernels.pad_in_tail() and options.reuse and "concat" in kinds,
            alignment=self.alignment,
            planned=frozenset(id(s) for s in _planned_specs(
                graph_module, graph_signature, alloc_inputs, True, self.alloc_mutable_buffers)),
            inputs=inputs)

    def _trials(self, graph_module: torch.fx.GraphModule, graph_signature: Any,
                original: dict[Any, tuple[Any, int]]) -> list[_Trial]:
        """Arena of: the exported order without links, with in-place links, with all links,
        then each other candidate order with all links (tensorplan's greedy each time)."""
        planned = frozenset(id(s) for s in _planned_specs(
            graph_module, graph_signature, self.alloc_graph_input, self.alloc_graph_output,
            self.alloc_mutable_buffers) if not s.const)
        orders = candidate_orders(graph_module.graph, graph_signature, planned) \
            if self.options.reorder else {"exported": list(graph_module.graph.nodes)}
        trials = []
        exported = orders.pop("exported")
        tried = [_Tried(step, "exported", kinds, exported) for step, kinds in _EXPORTED_STEPS]
        tried += [_Tried(f"+ order {name} (links found again)", name, _ALL_LINKS, nodes)
                  for name, nodes in orders.items()]
        for asked in tried:
            trials.append(self._trial(graph_module, graph_signature, original, asked))
        apply_order(graph_module, exported)
        _restore(original)
        return trials

    def _trial(self, graph_module: torch.fx.GraphModule, graph_signature: Any,
               original: dict[Any, tuple[Any, int]], asked: _Tried) -> _Trial:
        """The graph in ``asked.nodes``' order with the links of ``asked.kinds``, planned with
        tensorplan's greedy (the links and that order are left on the graph)."""
        apply_order(graph_module, asked.nodes)
        _restore(original)
        rules = self._rules(graph_module, graph_signature, True, self.alloc_graph_input,
                            asked.kinds)
        links = find_links(graph_module.graph, graph_signature, rules)
        apply_links(links)
        _reset_lifetimes(graph_module)
        update_all_tensors_lifetime(graph_module, graph_signature)
        specs = [s for s in _planned_specs(graph_module, graph_signature, self.alloc_graph_input,
                                           self.alloc_graph_output, self.alloc_mutable_buffers)
                 if s.storage_base is None]
        for spec in specs:
            spec.realign(self.alignment)
        buffers = [Buffer(s.allocated_memory, s.lifetime[0], s.lifetime[1] + 1) for s in specs]
        placement = plan_buffers(buffers, algorithm="greedy", alignment=self.alignment)
        return _Trial(asked, links, placement.peak, lower_bound(buffers, self.alignment))

    def _subgraph_links(self, graph_module: torch.fx.GraphModule,
                        graph_signature: Any) -> list[Link]:
        """Make the links inside every control-flow subgraph (never over its inputs)."""
        made: list[Link] = []
        for module in graph_module.modules():
            if module is graph_module or not isinstance(module, torch.fx.GraphModule):
                continue
            rules = self._rules(module, graph_signature, False, True, _ALL_LINKS)
            links = find_links(module.graph, graph_signature, rules)
            apply_links(links)
            made += links
        return made

    def _verify(self, graph_module: torch.fx.GraphModule, graph_signature: Any,
                bufsizes: list[int]) -> None:
        """tensorplan's checker on every graph (subgraphs included) and ExecuTorch's storage
        verifier on the method's graph (it does not walk subgraphs: ExecuTorch gives their
        carried values no offsets of their own); PlanError (ours) or ExecuTorch's
        InternalError (theirs) on a bad plan."""
        for module in graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                specs = [s for s in _planned_specs(module, graph_signature, True, True,
                                                   self.alloc_mutable_buffers)
                         if s.mem_offset is not None]
                _check_specs(specs, self.alignment,
                             bufsizes if module is graph_module else None, module)
        for bank, arena in zip(self.options.banks.banks if self.options.banks else (),
                               bufsizes[1:], strict=False):
            if bank.capacity is not None and arena > bank.capacity:
                raise PlanError(f"integrations.executorch: bank {bank.name!r} needs {arena} B, "
                                f"above its capacity {bank.capacity} B; this is a tensorplan "
                                "bug, please report it with the model")
        if self.options.executorch_verifier_now:
            self.verify(graph_module, graph_signature)

    def verify(self, graph_module: torch.fx.GraphModule, graph_signature: Any) -> None:
        """ExecuTorch's storage verifier's rules, with this pass's allocation options, on a
        graph it planned (over the pairs of specs whose bytes overlap: ``reuse_check.py``), and
        its input/output check; ExecuTorch's InternalError on a bad plan."""
        verifier = Verifier(graph_module, self.alloc_graph_input, self.alloc_graph_output,
                            self.alloc_mutable_buffers, graph_signature)
        verify_storage_reuse(verifier)
        verifier.verify_graph_input_output()


@dataclass(frozen=True)
class _Liveness:
    """What a method's written plan holds at each step (``GraphPlan``'s fields of the same
    names)."""

    peak_values: tuple[PeakValue, ...] = ()  # the storages live at the busiest step
    load: tuple[int, ...] = ()  # bytes of the planned storages live at each step
    storages: tuple[PlannedStorage, ...] = ()  # every planned storage, with its values


def _liveness(graph_module: torch.fx.GraphModule, graph_signature: Any) -> _Liveness:
    """The planned storages live at the step where the most bytes are (named by the node whose
    output or placeholder the storage is, largest first), the bytes live at each step, and
    each storage's values by node with their steps (folding some of them away shortens it to
    the others')."""
    specs = [s for s in _planned_specs(graph_module, graph_signature, True, True, True)
             if s.mem_offset is not None]
    roots = [s for s in specs if s.storage_base is None]
    if not roots:
        return _Liveness()
    steps = max(s.lifetime[1] for s in roots) + 1
    load = [0] * steps
    for spec in roots:
        for step in range(spec.lifetime[0], spec.lifetime[1] + 1):
            load[step] += spec.allocated_memory
    busiest = max(range(steps), key=load.__getitem__)
    names = _producers(graph_module)
    live = [PeakValue(names.get(id(s), "?"), s.allocated_memory) for s in roots
            if s.lifetime[0] <= busiest <= s.lifetime[1]]
    held: dict[int, list[HeldValue]] = {
        id(s): [HeldValue(names.get(id(s), "?"), s.lifetime[0], s.lifetime[1])] for s in roots}
    for spec in specs:
        if spec.storage_base is not None and id(spec.storage_base) in held:
            held[id(spec.storage_base)].append(
                HeldValue(names.get(id(spec), "?"), spec.lifetime[0], spec.lifetime[1]))
    return _Liveness(
        peak_values=tuple(sorted(live, key=lambda value: -value.nbytes)), load=tuple(load),
        storages=tuple(PlannedStorage(tuple(held[id(s)]), s.allocated_memory) for s in roots))


def _producers(graph_module: torch.fx.GraphModule) -> dict[int, str]:
    """id() of each spec -> the node that makes it (an op's out allocation, a placeholder)."""
    names: dict[int, str] = {}
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            names[id(node.meta.get("spec"))] = node.name
        for arg in node.kwargs.values():
            if isinstance(arg, torch.fx.Node) and arg.name.startswith("alloc"):
                value = arg.meta.get("spec")
                for spec in value if isinstance(value, (list, tuple)) else [value]:
                    names.setdefault(id(spec), node.name)
    return names


class _Signature(ExportGraphSignature):
    """A graph signature whose buffer lookups are computed once: ExecuTorch's spec collection
    asks them of every placeholder, and the signature rebuilds them on each call (quadratic in
    the buffers: 16 of a 60 s lowering of a model with 600 batch-norm buffers)."""

    @functools.cached_property
    def inputs_to_buffers(self) -> Mapping[str, str]:  # type: ignore[override]
        return ExportGraphSignature.inputs_to_buffers.fget(self)  # type: ignore[attr-defined]

    @functools.cached_property
    def buffers_to_mutate(self) -> Mapping[str, str]:  # type: ignore[override]
        return ExportGraphSignature.buffers_to_mutate.fget(self)  # type: ignore[attr-defined]


def _tight_shapes(graph_module: torch.fx.GraphModule) -> None:
    """Give each dynamic spec the upper bounds tensorplan's plan has (``specs/bounds.py``)
    where they are tighter than ExecuTorch's: it bounds each size by range arithmetic, which
    reads a loop's ``ceil(S / ceil(S / n))`` chunks as up to ``S`` of them."""
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            specs, values = node.meta.get("spec"), node.meta.get("val")
            pairs = zip(specs, values, strict=False) if isinstance(specs, (list, tuple)) and \
                isinstance(values, (list, tuple)) else [(specs, values)]
            for spec, value in pairs:
                if isinstance(spec, TensorSpec) and isinstance(value, torch.Tensor) and \
                        len(spec.shape) == value.dim() and spec.is_dynamic_shape_tensor:
                    _tighten(spec, value, node.name)


def _tighten(spec: TensorSpec, value: torch.Tensor, name: str) -> None:
    shape = [min(int(given), upper_bound(size, name)) if isinstance(size, torch.SymInt)
             else int(given) for given, size in zip(spec.shape, value.shape, strict=True)]
    if shape != list(spec.shape):
        contiguous = is_contiguous(spec)
        spec.shape = shape
        if contiguous:
            spec.stride = contiguous_stride_from_shape(torch.Size(shape))


def _settle_loop_views(graph_module: torch.fx.GraphModule) -> None:
    """Give each static view of a loop's (``scan``, ``map``) stacked output a spec of its own
    at the same bytes (the view's memory id and offset).

    ExecuTorch's emitter marks a loop's stacked outputs dynamic-bound when it emits the loop
    (its ``et_copy_index`` grows them), after which a static ``ViewSpec`` of one fails the
    guard that its dynamism equals its base's. The emitter elides a static, planned view: it
    is the same tensor as a spec of its own with the view's memory id and offset."""
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        stacked = {id(spec) for node in module.graph.nodes
                   if (operands := loop_operands(node)) is not None
                   for spec in node.meta["spec"][len(operands[0]):]}
        for node in module.graph.nodes:
            spec = node.meta.get("spec")
            if node.target is memory.view and isinstance(spec, ViewSpec) and \
                    id(viewed_spec(spec)) in stacked and spec.is_static_shape_tensor:
                own = TensorSpec.from_tensor(node.meta["val"])
                own.mem_id, own.mem_offset, own.lifetime = \
                    spec.mem_id, spec.mem_offset, list(spec.lifetime)
                node.meta["spec"] = own


def _planned_specs(graph_module: torch.fx.GraphModule, graph_signature: Any,
                   alloc_inputs: bool, alloc_outputs: bool, alloc_mutable: bool) -> list[Any]:
    """The specs ExecuTorch's ``apply_algo`` hands the planner for this graph, in its order."""
    return list(collect_specs_from_nodes(
        graph_module.graph.nodes, graph_signature, do_assertion=False,
        ignore_graph_input=not alloc_inputs, ignore_graph_output=not alloc_outputs,
        ignore_mutable_buffers=not alloc_mutable))


def _output_specs_of_its_values(graph_module: torch.fx.GraphModule) -> None:
    """Give the graph's output node the specs of the values it returns, an in-place op's
    value being the spec of the argument it writes.

    ExecuTorch's spec propagation gives the output node a spec per output before its
    re-inplace pass turns a KV-cache write (``index_put``) into one that writes the buffer;
    ExecuTorch makes the in-place op's spec its argument's only when it collects the specs to
    plan, in graph order, so the output node, last, still holds the spec it had and plans it
    live at the end (a static KV cache held twice: the buffers, and a second cache's worth at
    the output). The emitter reads the outputs from the node's arguments, not from this spec.
    """
    for node in graph_module.graph.nodes:
        if is_inplace_node(node):
            alias_inplace_result_specs(node)
    output = graph_module.graph.output_node()
    output.meta["spec"] = pytree.tree_map_only(
        torch.fx.Node, lambda node: node.meta.get("spec"), output.args[0])


def _all_specs(graph_module: torch.fx.GraphModule) -> list[Any]:
    specs: dict[int, Any] = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("spec")
        for spec in value if isinstance(value, (list, tuple)) else [value]:
            if hasattr(spec, "lifetime"):
                specs[id(spec)] = spec
    return list(specs.values())


def _storage_bases(graph_module: torch.fx.GraphModule) -> dict[Any, tuple[Any, int]]:
    """The links ExecuTorch itself made (``storage_base`` set before this pass), per spec."""
    return {spec: (spec.storage_base, spec.storage_base_offset)
            for spec in _all_specs(graph_module)}


def _restore(original: dict[Any, tuple[Any, int]]) -> None:
    for spec, (base, offset) in original.items():
        spec.storage_base, spec.storage_base_offset = base, offset


def _reset_lifetimes(graph_module: torch.fx.GraphModule) -> None:
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for spec in _all_specs(module):
                spec.lifetime = [None, None]


def _check_specs(specs: list[Any], alignment: int, bufsizes: list[int] | None,
                 graph_module: torch.fx.GraphModule) -> None:
    """tensorplan's own check of one graph's written plan, its control-flow bodies placed as
    regions of arena 1 (``bodies.py``) included."""
    roots = [s for s in specs if s.storage_base is None]
    regions = placed_regions(graph_module, DEFAULT_MEM_ID)
    for mem_id in {s.mem_id for s in roots} | ({DEFAULT_MEM_ID} if regions else set()):
        group = [s for s in roots if s.mem_id == mem_id]
        around = regions if mem_id == DEFAULT_MEM_ID else []
        violations = find_violations(
            [s.allocated_memory for s in group] + [region.size for region in around],
            [s.lifetime[0] for s in group] + [region.step for region in around],
            [s.lifetime[1] + 1 for s in group] + [region.step + 1 for region in around],
            [s.mem_offset for s in group] + [region.offset for region in around], alignment,
            None if bufsizes is None else bufsizes[mem_id],
            names=[f"{s} (mem_id {mem_id})" for s in group] +
                  [f"the body {region.node} (mem_id {mem_id})" for region in around])
        if violations:
            raise plan_error(violations, f"integrations.executorch ({graph_module._get_name()})")
    for spec in specs:
        base = spec.storage_base
        if base is None:
            continue
        inside = (spec.mem_id == base.mem_id
                  and spec.mem_offset == base.mem_offset + spec.storage_base_offset
                  and spec.storage_base_offset + spec.allocated_memory <= base.allocated_memory)
        if not inside:
            raise PlanError(f"integrations.executorch: {spec} is linked into {base} at "
                            f"{spec.storage_base_offset} but placed at mem_id {spec.mem_id} "
                            f"offset {spec.mem_offset}; this is a tensorplan bug, please "
                            "report it with the model")

