"""From a program to an ExecuTorch ``.pte`` that carries tensorplan's lowered plan.

:func:`to_executorch` is ExecuTorch's own ``to_edge(...).to_executorch(config)`` with every
matrix product on a fast kernel (``rewrite.py``: ``linear`` without a copied transpose), the
memory planning pass replaced by :class:`~.planning_pass.TensorplanPlanningPass` (tensorplan's node
order, in-place reuse over measured kernels, concatenation in place, tensorplan's planner, both
verifiers: ExecuTorch's on the program kept) and, with ``fold=True``, the folding that gives
the smallest arena plus constants (the smaller arena on a tie): the program is lowered without
folding, with tensorplan's folding (``fold.py``: only what the constants or the peak pay for)
and with ExecuTorch's constant propagation, and the smallest total is kept, so folding never
grows it. Every ExecuTorch step runs unwrapped: an op ExecuTorch cannot lower raises
ExecuTorch's own error.

:func:`lower` does the same and also returns what each choice gave (:class:`Shipped`), for the
CLI and the benchmark.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from tensorplan.banks.choice import Bank
from tensorplan.errors import InputError, ShipError, TensorPlanError
from tensorplan.integrations.executorch.algo import memory_planning_module
from tensorplan.integrations.executorch.banks import BankSetup
from tensorplan.integrations.executorch.broadcasts import broadcast_copies_removed
from tensorplan.integrations.executorch.check import PteCheck, check_exported, whose_refusal
from tensorplan.integrations.executorch.fold import (
    apply_folds,
    choose_folds,
    constant_bytes,
    foldable_values,
    frontier,
)
from tensorplan.integrations.executorch.identities import identity_copies_removed
from tensorplan.integrations.executorch.loops import with_stacked_outputs_sized
from tensorplan.integrations.executorch.rewrite import NONE, ProductRewrites, fast_products
from tensorplan.integrations.executorch.scratch import scratch_as_allocs
from tensorplan.options import CompileOptions, chosen_options
from tensorplan.rewrite.grouped import grouped_products

if TYPE_CHECKING:
    from executorch.exir import ExecutorchProgramManager

    from tensorplan.integrations.executorch.planning_pass import GraphPlan


@dataclass(frozen=True)
class FoldChoice:
    """One folding tried: the program's planned bytes and constant bytes with it."""

    name: str  # "none", "tensorplan" (fold.choose_folds), "executorch const-prop"
    arena_bytes: int
    constant_bytes: int
    lowered: bool = True  # False: not lowered, its figures estimated (ship._unpaid): it
    #                       folds nothing at the peak and adds constants, so it cannot win
    instructions: int | None = None  # instructions run at each call, over all methods (the
    #                                  values it folds are read, not computed); None: not lowered


@dataclass(frozen=True)
class Shipped:
    """A lowered program and what its plan is made of."""

    manager: Any  # executorch.exir.ExecutorchProgramManager (.buffer is the .pte)
    arena_bytes: int  # planned bytes over all methods (ExecuTorch's non-constant buffers)
    constant_bytes: int  # bytes of the program's constant data
    folding: str  # the FoldChoice kept
    why: str  # why it was kept over the others (``prefer``: ship.PREFERENCES)
    folds: tuple[FoldChoice, ...]  # every folding tried
    methods: Mapping[str, Any]  # method name -> planning_pass.GraphPlan
    products: ProductRewrites  # matrix products moved onto fast kernels (rewrite.py)
    identities: int  # copies that changed nothing, dropped (identities.py)
    broadcasts: int  # expands read only by broadcasting kernels, dropped (broadcasts.py)
    check: PteCheck | None = None  # the .pte run in ExecuTorch's runtime vs eager (check=True)


@dataclass(frozen=True)
class _Lowering:
    """A copy of the program with one folding, lowered with tensorplan's pass (``_lowered``)."""

    choice: FoldChoice  # the folding and the figures it gave
    manager: ExecutorchProgramManager  # the program lowered
    plans: dict[str, GraphPlan]  # method name -> the plan its pass recorded
    passes: Any  # its TensorplanPlanningPass, or method name -> one (as the config names them)


class _Counted(NamedTuple):
    """A folding lowered so far, with its constants counted (a tuple: it unpacks as
    ``choice, constants``)."""

    choice: FoldChoice  # the folding and the figures its lowering gave
    constants: int  # its constant bytes by ``fold.constant_bytes``' count (no padding)


def to_executorch(program: Any, config: Any = None, *, reuse: bool = True, reorder: bool = True,
                  fold: bool = True, algorithm: str = "auto", banks: Sequence[Bank] | None = None,
                  moves: bool = True,
                  pin: Mapping[str, str] | None = None, check: bool = False,
                  prefer: str = "arena", options: CompileOptions | None = None) -> Any:
    """An ``ExecutorchProgramManager`` whose memory plan is tensorplan's.

    ``program`` is a ``torch.export.ExportedProgram``, a ``tensorplan.Program`` (its exported
    program), or an ``EdgeProgramManager`` (a user's ``to_edge`` or
    ``to_edge_transform_and_lower`` result, delegated or not; it is not modified). ``config`` is
    an ``ExecutorchBackendConfig`` (default: ExecuTorch's default); its memory planning pass's
    allocation options (inputs, outputs, mutable buffers, alignment) are kept. ``reuse``: in-place
    reuse over the kernels measured in ``kernels.py``, ``cat`` inputs made in their slices,
    ExecuTorch's own re-inplace pass (``index_put`` into a KV cache, with its in-place kernel),
    and grouped-query attention's KV heads read without their repeat (``rewrite/grouped.py``:
    an exported program's, as ``tp.compile`` does);
    ``reorder``: tensorplan's node order; ``fold``: the folding of constants (none, tensorplan's,
    ExecuTorch's constant propagation) with the smallest arena, then the smallest arena +
    constants (``prefer="arena"``: the arena is the RAM, constants are flash or mapped), or
    the smallest arena + constants, then arena (``prefer="total"``), or the smallest arena,
    then the fewest instructions run at each call (``prefer="time"``: a mask or a rotary
    table folded is read from the constants, not computed at each call); ``algorithm``:
    tensorplan's planner ("auto", "greedy", "optimal", "naive").
    ``banks`` (``tp.Bank``, fastest first): each bank its own ``mem_id`` (1, 2, ...), every
    planned tensor in the bank that makes its traffic cheapest within the capacities
    (``tensorplan.banks``); ``pin`` keeps a node of the ExecuTorch graph (a placeholder: an input or
    buffer name) in a bank; ``moves``: a storage may be copied once to another bank where
    that costs less (a spill or a prefetch, ``moves.py``; on by default, ``False`` keeps
    each storage in one bank for its whole life).
    ``check``: load the ``.pte`` in ExecuTorch's runtime, run it on the program's example inputs
    and compare with eager (``check.check_exported``); raises ``ShipError`` when the runtime
    refuses it or its outputs differ.
    ``options`` (``tp.CompileOptions``): ``reuse``, ``reorder``, ``fold``, ``algorithm``,
    ``banks`` and ``pin`` as one object (its ``schedule``, ``plan.algorithm`` and ``banks``
    groups), the keywords then left at their defaults; a ``tensorplan.Program`` given with
    neither ships with the options it was compiled with (``Program.options``).
    ``.buffer`` of the result is the ``.pte``. Raises ``TensorPlanError`` when executorch is
    not installed.
    """
    shipped = lower(program, config, reuse=reuse, reorder=reorder, fold=fold,
                    algorithm=algorithm, banks=banks, pin=pin, moves=moves, check=check,
                    prefer=prefer, options=options)
    if shipped.check is not None and not shipped.check.matches:
        raise ShipError(f"the .pte runs in ExecuTorch's runtime but differs from eager by "
                        f"{shipped.check.max_abs_error:.3g} (outputs "
                        f"{', '.join(shipped.check.outputs)}); report it with the model, or ship "
                        "without the technique that breaks it (reuse=False, reorder=False, "
                        "fold=False)")
    return shipped.manager


def lower(program: Any, config: Any = None, *, reuse: bool = True, reorder: bool = True,
          fold: bool = True, algorithm: str = "auto",
          kernels: Mapping[str, frozenset[str]] | None = None,
          broadcasting: Mapping[str, frozenset[str]] | None = None,
          banks: Sequence[Bank] | None = None, pin: Mapping[str, str] | None = None,
          moves: bool = True, check: bool = False, eager: Any = None,
          prefer: str = "arena", options: CompileOptions | None = None) -> Shipped:
    """:func:`to_executorch`, returning the manager with its figures (see :class:`Shipped`).
    With ``check``, ``Shipped.check`` holds the run in ExecuTorch's runtime against ``eager``
    (default: the exported program's module) on the program's example inputs; a runtime that
    refuses the program raises ``ShipError``.

    ``kernels`` replaces the measured table of ``kernels.py`` (op key -> the arguments its
    ``out`` may be placed on), and ``broadcasting`` the measured table of which kernels
    broadcast which arguments (``kernels.broadcasting``; ``{}`` drops no expand): for
    measuring another runtime's kernels, not for shipping.
    """
    asked = _asked(program, options, CompileOptions.of(
        reuse=reuse, reorder=reorder, fold=fold, algorithm=algorithm, banks=banks, pin=pin))
    schedule, chosen_banks = asked.schedule, asked.banks
    if prefer not in PREFERENCES:
        raise InputError(f"integrations.executorch: prefer must be one of "
                         f"{', '.join(map(repr, PREFERENCES))}, got {prefer!r}")
    memory_planning_module()
    from tensorplan.integrations.executorch.planning_pass import PassOptions

    edge = _edge_program(program, schedule.reuse)
    if edge is program:  # the caller's: it is not modified
        edge = _sharing_constants(edge)
    with torch.no_grad():
        for method in edge.methods:  # before any rewrite or folding: a scratch is no constant
            scratch_as_allocs(edge.exported_program(method))
        products = sum((fast_products(edge.exported_program(m)) for m in edge.methods), NONE)
        identities = sum(identity_copies_removed(edge.exported_program(m))
                         for m in edge.methods)
        broadcasts = sum(broadcast_copies_removed(edge.exported_program(m), broadcasting)
                         for m in edge.methods)
    setup = None if chosen_banks.banks is None else \
        BankSetup.of(chosen_banks.banks, dict(chosen_banks.pin) or None, moves=moves)
    passes_may = PassOptions(reuse=schedule.reuse, reorder=schedule.reorder,
                             algorithm=asked.plan.algorithm, overlap_safe=kernels, banks=setup,
                             executorch_verifier_now=False)
    base = _base_config(config, inputs_in_arena=asked.plan.inputs_in_arena)
    if not schedule.fold:
        best = _lowered("as configured", edge, base, passes_may, {},
                        base.do_quant_fusion_and_const_prop)
        tried = [best.choice]
    else:
        best, tried = _best_folding(edge, base, passes_may, prefer)
    passes = best.passes
    for method in edge.methods:  # ExecuTorch's verifier, on the program kept
        kept = best.manager.exported_program(method)
        (passes[method] if isinstance(passes, dict) else passes).verify(
            kept.graph_module, kept.graph_signature)
    checked = None
    if check:
        exported = getattr(program, "exported_program", program)
        if not isinstance(exported, torch.export.ExportedProgram):
            raise InputError("check=True runs the program's example inputs, which an "
                             "EdgeProgramManager does not keep; call check_pte(pte, inputs, "
                             "expected) from tensorplan.integrations.executorch.check")
        try:
            checked = check_exported(best.manager.buffer, exported, eager)
        except ShipError as refused:
            raise ShipError(f"{refused}; {whose_refusal(exported)}") from None
    choice = best.choice
    return Shipped(best.manager, choice.arena_bytes, choice.constant_bytes, choice.name,
                   _why(choice, tried, prefer), tuple(tried), best.plans, products, identities,
                   broadcasts, checked)


def _asked(program: Any, options: CompileOptions | None,
           keywords: CompileOptions) -> CompileOptions:
    """The options a lowering runs with: ``options`` when given (the keywords then at their
    defaults), else the keywords; keywords all at their defaults and a ``tensorplan.Program``
    ship with the options it was compiled with."""
    compiled = getattr(program, "options", None)
    if options is None and keywords == CompileOptions() and isinstance(compiled, CompileOptions):
        return compiled
    return chosen_options(keywords, options, "integrations.executorch")


def _best_folding(edge: Any, config: Any, options: Any,
                  prefer: str) -> tuple[_Lowering, list[FoldChoice]]:
    """The lowering of ``edge`` with the folding ``prefer`` ranks first (``_rank``): none,
    tensorplan's (``fold.choose_folds``, paid for by the unfolded plan's busiest step), and
    ExecuTorch's constant propagation; and every ``FoldChoice`` tried. A folding that cannot
    win (``_unpaid``, which counts bytes only: not for ``prefer="time"``) is not lowered."""
    best = _lowered("none", edge, config, options, {}, False)
    plans = best.plans
    with torch.no_grad():
        known = {m: foldable_values(edge.exported_program(m)) for m in edge.methods}
    ours = {m: {n.name for n in choose_folds(known[m], dict(plans[m].peak_values))}
            for m in edge.methods}
    everything = {m: {n.name for n in frontier(known[m])} for m in edge.methods}
    candidates = []
    if any(ours.values()) and any(not e <= ours[m] for m, e in everything.items()):
        candidates.append((OURS, ours, False))
    if any(everything.values()):
        candidates.append(("executorch const-prop", {}, True))
    lowered = [_Counted(best.choice, sum(constant_bytes(known[m], set()) for m in edge.methods))]
    tried = [best.choice]
    for name, folds, const_prop in candidates:
        folded = {m: {n for n in known[m] if n.op != "placeholder"
                      and (const_prop or n.name in folds.get(m, ()))} for m in edge.methods}
        counted = sum(constant_bytes(known[m], folded[m]) for m in edge.methods)
        unpaid = None if prefer == "time" else _unpaid(plans, lowered, folded, counted, name)
        if unpaid is not None:
            tried.append(unpaid)
            continue
        # one candidate's program at a time beside the best so far (each holds the weights)
        result = _lowered(name, edge, config, options, folds, const_prop)
        tried.append(result.choice)
        lowered.append(_Counted(result.choice, counted))
        if _rank(result.choice, prefer) < _rank(best.choice, prefer):
            best = result
        del result
    return best, tried


PLANNER_ROUNDING = 64  # B: an unfolded plan this close to its bound (30 layers of SmolLM2:
#                       16 B over 52 MB) leaves a folding that keeps the busiest step full
#                       less to win than any tensor at that step; it is not lowered for it


def _unpaid(plans: Mapping[str, GraphPlan], lowered: Sequence[_Counted],
            folded: Mapping[str, set[torch.fx.Node]], counted: int,
            name: str) -> FoldChoice | None:
    """The estimated figures of a folding that cannot win, or None when it must be lowered.
    ``plans`` are the unfolded program's (the first of ``lowered``: each folding lowered so
    far, with its constant bytes by ``fold.constant_bytes``' count; ``counted``: this one's).
    It cannot win when every unfolded plan sits at its lower bound (within
    ``PLANNER_ROUNDING``) and removing the storages of the values it folds leaves every
    method's busiest step as full (``_peak_without``; so its arena is the unfolded one, or
    at most that rounding below), and a folding lowered with an arena no larger holds no more
    constants by that count (which differs from the emitted buffer's only by padding)."""
    if any(p.arena_bytes - p.lower_bound_bytes > PLANNER_ROUNDING or not p.load
           for p in plans.values()) or any(
            _peak_without(plans[m], {n.name for n in nodes}) < max(plans[m].load)
            for m, nodes in folded.items()):
        return None
    unfolded, _ = lowered[0]
    arena = unfolded.arena_bytes
    for choice, constants in lowered:
        if choice.arena_bytes <= arena and constants <= counted:
            return FoldChoice(name, arena, choice.constant_bytes + counted - constants,
                              lowered=False)
    return None


def _peak_without(plan: GraphPlan, names: set[str]) -> int:
    """The most bytes live at one step of ``plan`` once the values ``names`` are folded away:
    a storage that holds only such values is gone, one that holds others too lives from the
    first of the others to the last."""
    load = list(plan.load)
    for held, size in plan.storages:
        kept = [(first, last) for node, first, last in held if node not in names]
        span = range(min(f for _, f, _ in held), max(last for *_, last in held) + 1)
        left = range(min(f for f, _ in kept), max(last for _, last in kept) + 1) if kept \
            else range(0)
        for step in span:
            if step not in left:
                load[step] -= size
    return max(load)


PREFERENCES = {  # prefer -> what the folding choice minimises first, what it keeps of ties
    "arena": ("arena", "the smallest arena + constants"),
    "total": ("arena + constants", "the smallest arena"),
    "time": ("arena", "the fewest instructions run at each call"),
}


def _rank(choice: FoldChoice, prefer: str) -> tuple[int, ...]:
    """What the folding choice minimises: the arena, then arena + constants ("arena");
    arena + constants, then the arena ("total"); or the arena, then the instructions run at
    each call (the values folded are read from the constants, not computed), then
    arena + constants ("time")."""
    total = choice.arena_bytes + choice.constant_bytes
    if prefer == "time":
        return choice.arena_bytes, choice.instructions or 0, total
    return (choice.arena_bytes, total) if prefer == "arena" else (total, choice.arena_bytes)


def _why(kept: FoldChoice, tried: Sequence[FoldChoice], prefer: str) -> str:
    """Why ``kept`` was kept: what it is smallest in, and what the next best had."""
    others = sorted((c for c in tried if c.name != kept.name), key=lambda c: _rank(c, prefer))
    if not others:
        return "the only folding tried"
    first, second = PREFERENCES[prefer]
    runner = others[0]
    figures = (f"{runner.name}: arena {runner.arena_bytes:,} B, total "
               f"{runner.arena_bytes + runner.constant_bytes:,} B")
    if prefer == "time":
        figures += f", {runner.instructions} instructions"
    if _rank(kept, prefer)[0] < _rank(runner, prefer)[0]:
        return f"the smallest {first} ({figures})"
    if _rank(kept, prefer)[1] < _rank(runner, prefer)[1] or prefer != "time":
        return f"as small an {first} as any, {second} of those ({figures})"
    return ("as small an arena and as few instructions as any, the smallest arena + constants "
            f"of those ({figures})")


def _sharing_constants(edge: Any) -> Any:
    """A deep copy of ``edge`` that shares its constant tensors (weights, buffers, lifted
    constants): every pass here replaces the program's constants, none writes into one, so a
    copy need not hold the weights a second time (a 135 M-parameter model: 0.5 GB)."""
    memo: dict[int, Any] = {}
    for method in edge.methods:
        program = edge.exported_program(method)
        for value in [*program.state_dict.values(), *program.constants.values()]:
            if isinstance(value, torch.Tensor):
                memo[id(value)] = value
    return copy.deepcopy(edge, memo)


def executorch_arena_bytes(program: Any) -> int:
    """The arena ExecuTorch's default lowering (``to_edge(...).to_executorch()``, its greedy
    planner) gives the same program: the reference ``tensorplan pte`` prints."""
    memory_planning_module()
    with torch.no_grad():
        return _arena_bytes(copy.deepcopy(_edge_program(program, reuse=False)).to_executorch())


OURS = "tensorplan"  # the FoldChoice name of fold.choose_folds' folding


def _lowered(name: str, edge: Any, config: Any, options: Any, folds: Mapping[str, set[str]],
             const_prop: bool) -> _Lowering:
    """A copy of ``edge`` with ``folds`` (method -> value names) folded, lowered with
    tensorplan's pass."""
    passes = _planning_passes(config, edge, options)
    candidate = _sharing_constants(edge)
    with torch.no_grad():
        for method, names in folds.items():
            apply_folds(candidate.exported_program(method), names)
        lowering = dataclasses.replace(
            config, do_quant_fusion_and_const_prop=const_prop, memory_planning_pass=passes,
            run_reinplace_pass=config.run_reinplace_pass or options.reuse)
        manager = with_stacked_outputs_sized(candidate.to_executorch(lowering), lowering)
    choice = FoldChoice(name, _arena_bytes(manager), _constant_bytes(manager),
                        instructions=_instruction_count(manager))
    return _Lowering(choice, manager, _method_plans(passes, edge), passes)


def _edge_program(program: Any, reuse: bool) -> Any:
    """An ``EdgeProgramManager`` for the program (``to_edge`` of an exported program, its
    grouped-query products made without the repeated heads with ``reuse``)."""
    from executorch.exir import EdgeProgramManager, to_edge

    if isinstance(program, EdgeProgramManager):
        return program
    exported = getattr(program, "exported_program", program)
    if not isinstance(exported, torch.export.ExportedProgram):
        raise TensorPlanError(
            f"integrations.executorch.to_executorch: expected an ExportedProgram, a "
            f"tensorplan.Program or an EdgeProgramManager, got {type(program).__name__}; export "
            "the model first (tensorplan.capture or torch.export.export)")
    with torch.no_grad():
        return to_edge(grouped_products(exported) if reuse else exported)


def _base_config(config: Any, *, inputs_in_arena: bool = True) -> Any:
    """``config`` (default: ExecuTorch's default), with the inputs left out of the planned
    memory (``alloc_graph_input=False`` in its planning passes) when ``inputs_in_arena`` is
    False, as ``tp.compile(..., inputs_in_arena=False)`` plans them (the given config is not
    modified)."""
    from executorch.exir import ExecutorchBackendConfig

    if config is None:
        config = ExecutorchBackendConfig()
    if not isinstance(config, ExecutorchBackendConfig):
        raise TensorPlanError(
            f"integrations.executorch.to_executorch: config must be an "
            f"ExecutorchBackendConfig, got {type(config).__name__}")
    if inputs_in_arena:
        return config
    given = config.memory_planning_pass
    passes = {name: copy.copy(one) for name, one in given.items()} \
        if isinstance(given, dict) else copy.copy(given)
    for one in passes.values() if isinstance(passes, dict) else (passes,):
        one.alloc_graph_input = False
    return dataclasses.replace(config, memory_planning_pass=passes)


_ALLOCATION_OPTIONS = ("alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers",
                       "share_mutable_buffers", "alignment")


def _planning_passes(config: Any, edge: Any, options: Any) -> Any:
    """tensorplan's pass with the allocation options of the config's pass (one per method when
    the config names a pass per method)."""
    from tensorplan.integrations.executorch.planning_pass import TensorplanPlanningPass

    def replace(given: Any) -> Any:
        kept = {name: getattr(given, name) for name in _ALLOCATION_OPTIONS
                if hasattr(given, name)}
        return TensorplanPlanningPass(options, **kept)

    given = config.memory_planning_pass
    if isinstance(given, dict):
        return {name: replace(given.get(name)) for name in edge.methods}
    return replace(given)


def _method_plans(passes: Any, edge: Any) -> dict[str, GraphPlan]:
    """Method name -> the GraphPlan its pass recorded (methods are planned in edge order)."""
    if isinstance(passes, dict):
        return {name: passes[name].plans[0] for name in edge.methods}
    return dict(zip(edge.methods, passes.plans, strict=True))


def _arena_bytes(manager: Any) -> int:
    """Planned bytes of every method: each one's non-constant buffers past id 0."""
    return sum(sum(plan.non_const_buffer_sizes[1:])
               for plan in manager.executorch_program.execution_plan)


def _instruction_count(manager: Any) -> int:
    """Instructions of every method's chains: what one call of each method runs."""
    return sum(len(chain.instructions) for plan in manager.executorch_program.execution_plan
               for chain in plan.chains)


def _constant_bytes(manager: Any) -> int:
    """Bytes of the program's constant tensors (its constant buffer, as ExecuTorch 1.5.1 emits
    them by default; padding included)."""
    return sum(len(buffer.storage) for buffer in manager.executorch_program.constant_buffer)
