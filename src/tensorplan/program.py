"""``tp.compile``: the whole pipeline, capture → propagate → alias → lifetimes → plan."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from tensorplan.analysis.alias import AliasTable, planned_specs
from tensorplan.analysis.liveness import GraphLifetimes, lifetimes, scheduled_nodes
from tensorplan.banks.choice import Bank, BankOptions, BankRequest, bank_request
from tensorplan.errors import InputError, PlanError, TensorPlanError
from tensorplan.formats.artifact import read_artifact, write_artifact
from tensorplan.formats.encoding import encode_plan
from tensorplan.formats.options_json import OPTIONS_KEY, encode_options
from tensorplan.frontend.capture import ProgramManager, capture
from tensorplan.frontend.roles import Roles, read_roles
from tensorplan.internal import stage
from tensorplan.options import CompileOptions, chosen_options
from tensorplan.plan.budget import Rewrite, check_arena
from tensorplan.plan.plan import MemoryPlan, PlanOptions, plan_memory
from tensorplan.plan.planners import PlannerParams
from tensorplan.plan.symbolic.stack import with_symbolic
from tensorplan.rewrite.chunks import Chunking
from tensorplan.rewrite.chunks import choose as choose_chunks
from tensorplan.rewrite.grouped import grouped_products
from tensorplan.rewrite.options import MAX_PATCH_OVERHEAD, RewriteOptions
from tensorplan.rewrite.patches import Patching
from tensorplan.rewrite.patches import choose as choose_patches
from tensorplan.runtime.lower import Lowered, ProgramFacts, lower_program
from tensorplan.runtime.runner import Runner
from tensorplan.schedule.fold import NOTHING_FOLDED, Folded
from tensorplan.schedule.order import Order
from tensorplan.schedule.schedule import Schedule, ScheduleOptions, schedule
from tensorplan.specs.propagate import propagate
from tensorplan.specs.spec import SpecTable


@dataclass(frozen=True)
class Program:
    """A captured program with its specs, storages and verified memory plan: data only.

    ``runner()`` hands out a ``Runner`` that owns an arena and runs the program; ``run`` uses
    one default runner, made on first use, whose state persists across calls.
    """

    exported_program: ExportedProgram  # core-ATen program
    specs: SpecTable                   # every value's spec, with its storage id
    alias: AliasTable                  # which values share storage
    plan: MemoryPlan                   # offsets of every storage in one arena
    roles: Roles                       # what every placeholder and output is
    schedule: Schedule | None = None   # node order, reuse and folding (None: graph order,
    #                                    one storage per value, nothing folded)
    patching: Patching | None = None   # the patchings tried and kept (None: not asked for)
    chunking: Chunking | None = None   # the chunkings tried and kept (None: not asked for)
    options: CompileOptions = CompileOptions()  # what the compile was asked (saved with it)
    _default: list[Runner] = field(default_factory=list, init=False, repr=False, compare=False)
    _made: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                  compare=False)

    def __repr__(self) -> str:
        """A few lines, not the tables: the values, the schedule's and the rewrites' choices,
        and the plan's own ``repr`` (arena, lower bound, dims with their ranges)."""
        schedule = self.schedule
        reuses = len(schedule.reuses) if schedule else 0
        rewrites = ", ".join(self._rewrites()) or "none"
        return (f"Program({len(self.specs)} values, {reuses} written in place, "
                f"{len(self.folded.computed)} folded, rewrites: {rewrites},\n"
                f"        plan={self.plan!r})")

    def _rewrites(self) -> list[str]:
        """The rewrites kept, in a few words each."""
        found = []
        if self.patching is not None and self.patching.chosen.split:
            rows, cols = self.patching.chosen.grid
            found.append(f"patched {rows}x{cols} up to {self.patching.chosen.split}")
        if self.chunking is not None and self.chunking.chosen.chunks > 1:
            found.append(f"chunked in {self.chunking.chosen.chunks}")
        return found

    def runner(self, arena: str = "grow") -> Runner:
        """A new runner with its own arena and state (initial buffer values) and fresh stats.

        ``arena``: "grow" (default; for a program with dynamic dims) starts at the smallest
        sizes' arena and grows it to what the largest sizes run so far need
        (``plan.arena_bytes_at``), keeping the state; "upper" allocates the arena at the dims'
        upper bounds once (see ``Runner``)."""
        return Runner(self, arena)

    @property
    def order(self) -> Order | None:
        """Top-level node names in run order (None: graph order)."""
        return self.schedule.order if self.schedule else None

    @property
    def folded(self) -> Folded:
        """The values computed at compile time, kept as constants."""
        return self.schedule.folded if self.schedule else NOTHING_FOLDED

    @property
    def default_runner(self) -> Runner:
        """The runner ``run``, ``stats`` and ``state_dict`` use (made once, on first use)."""
        with self._made:
            if not self._default:
                self._default.append(self.runner())
            return self._default[0]

    def lowering(self) -> tuple[Lowered, ...]:
        """How every node runs: one row per node of every graph (``tensorplan run --explain``)."""
        with stage("runtime lowering", self.exported_program):
            return lower_program(self.exported_program.graph_module,
                                 ProgramFacts.of(self.specs, self.roles, self.folded,
                                                 self.alias.slices),
                                 self.order)

    def document(self, name: str = "model") -> dict[str, Any]:
        """The plan and every tensor value's spec as a JSON-ready dict (``encode_plan``), with
        the options the compile ran with (``"options"``)."""
        return {**encode_plan(self.exported_program, self.roles, self.specs, self.plan,
                              self.schedule, name),
                OPTIONS_KEY: encode_options(self.options)}

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the program, its specs, its plan and its options to one file; ``tp.load``
        reads them back."""
        with stage("save", self.exported_program):
            write_artifact(path, self.exported_program, self.specs, self.document())

    def run(self, *args: Any, copy_outputs: bool = True, **kwargs: Any) -> Any:
        """Run the program out of its arena; outputs come in the model's own structure.

        By default outputs are fresh tensors. With ``copy_outputs=False`` they are views into the
        arena, valid only until the next run. Raises ``InputError`` for inputs that do not match
        the compiled signature (count, dtype, rank, a dim outside its range) or whose values an
        op refuses as eager does (an index out of range). Calls from several
        threads are serialised; use one ``runner()`` per thread to run in parallel.
        """
        return self.default_runner.run(*args, copy_outputs=copy_outputs, **kwargs)

    @property
    def stats(self) -> dict[str, int]:
        """Op name -> how many times it ran functionally and was copied into its view."""
        return dict(self.default_runner.stats.fallbacks)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The current value of every mutated buffer (by buffer name), as copies."""
        return self.default_runner.state_dict()


def _check_alignment(alignment: int, specs: SpecTable) -> None:
    """Every value of the arena must start on a multiple of its element size."""
    if not isinstance(alignment, int) or alignment < 1:
        raise PlanError(f"plan: alignment must be a positive number of bytes, got {alignment!r}")
    itemsizes = {spec.dtype.itemsize for _, spec in specs.tensors() if not spec.const}
    needed = math.lcm(*itemsizes) if itemsizes else 1
    if alignment % needed:
        widest = max(itemsizes)
        raise PlanError(f"plan: alignment {alignment} B does not keep every value on a multiple "
                        f"of its element size (the program has {widest}-byte elements); use a "
                        f"multiple of {needed} B (the default is 16)")


def compile(model_or_program: torch.nn.Module | ExportedProgram | ProgramManager | str
            | os.PathLike[str],
            args: tuple[Any, ...] | None = None, kwargs: Mapping[str, Any] | None = None, *,
            dynamic_shapes: Any = None, algorithm: str = "auto", alignment: int = 16,
            time_limit: float | None = None, reuse: bool = True, reorder: bool = True,
            fold: bool = True, planner_params: PlannerParams | None = None,
            max_arena_bytes: int | None = None, patches: str | tuple[int, int] | None = None,
            max_overhead: float = MAX_PATCH_OVERHEAD, chunks: str | int | None = None,
            banks: Sequence[Bank] | None = None,
            pin: Mapping[str, str] | None = None,
            constants_bank: str | None = None, inputs_in_arena: bool = True,
            options: CompileOptions | None = None) -> Program:
    """Capture (unless given a program), propagate, fold, order and reuse, plan and verify.

    A program may be given as an ``ExportedProgram``, a ``.pt2`` path or ExecuTorch's
    ``EdgeProgramManager`` (its ``forward`` program, in its dialect: a Cortex-M program is
    planned and run through its ``cortex_m::`` kernels' reference implementations).

    ``patches`` (``patches.py``): ``None`` runs the program as exported; ``(rows, cols)`` or
    ``"auto"`` (grids 2x2, 3x3, 4x4) first rewrites it to run its high-resolution prefix patch by
    patch, at the split and grid whose plan (tensorplan's greedy, the same switches) has the
    smallest arena among those within ``max_overhead`` times the convolutions' multiply-adds,
    keeping the program as exported unless a patching is smaller; ``Program.patching`` lists
    what was tried.

    ``chunks`` (``chunks.py``): ``None`` runs the program as exported; a number of chunks or
    ``"auto"`` (2, 4, 8, 16, 32) first rewrites it to run each transformer layer's attention
    (by query rows), MLP and residuals chunk by chunk of the token rows, at the count whose
    plan is smallest, keeping the program as exported unless a chunking is smaller;
    ``Program.chunking`` lists what was tried, the regions and the largest values left whole.
    With both, chunks are chosen first and patches judged against the peak they leave; when
    chunks gained nothing but a patching is kept, chunks are chosen again on the patched
    program (a conv stem's peak may have hidden the layers').

    ``banks`` (``tensorplan.banks``): memories fastest first, ``[tp.Bank("sram", 256 * 1024, 1.0),
    tp.Bank("dram", None, 40.0)]``; each storage is put in one bank so that the bytes moved
    times the banks' costs are least with every bank's planned arena within its capacity, and
    each bank is planned as its own arena (``plan.banks``, ``plan.bank_of(value)``). ``pin``
    fixes the bank of a value (an input, output, state, constant, any value by name);
    constants are read from ``constants_bank`` (default: the slowest) and take its capacity.
    Without ``banks``: one arena.

    ``inputs_in_arena=False`` (ExecuTorch's ``alloc_graph_input=False``): the user inputs are
    placed in a buffer of their own right after the arena (``plan.input_bytes``; on a device,
    the camera's frame buffer), not counted in ``plan.arena_bytes``, and the rewrites choose
    by the arena so counted. Nothing is made over an input in place either way. Not with
    ``banks``: there, pin the inputs to a bank of their own.

    ``reuse``, ``reorder`` and ``fold`` switch the bound-lowering steps (``schedule.py``;
    ``reuse`` also has grouped-query attention read its KV heads without the repeat copy,
    ``rewrite/grouped.py``);
    ``planner_params`` tunes the planners (None: the defaults). Dynamic dims are planned at
    their upper bounds. The returned plan has been verified. ``max_arena_bytes``: an arena
    above it raises ``PlanError`` (how much over, the peak step and what is live there).

    ``options`` (``tp.CompileOptions``) gives all of the above in one object, as the command
    line builds it; the keywords then stay at their defaults. The options the compile ran with
    are ``prog.options``.

    >>> prog = compile(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    >>> prog.plan.arena_bytes, prog.plan.lower_bound_bytes
    (80, 80)
    """
    asked = CompileOptions.of(
        algorithm=algorithm, alignment=alignment, time_limit=time_limit, reuse=reuse,
        reorder=reorder, fold=fold, planner_params=planner_params,
        max_arena_bytes=max_arena_bytes, patches=patches, max_overhead=max_overhead,
        chunks=chunks, banks=banks, pin=pin, constants_bank=constants_bank,
        inputs_in_arena=inputs_in_arena)
    chosen = chosen_options(asked, options, "compile")
    with stage("capture"):
        program = capture(model_or_program, args, kwargs, dynamic_shapes=dynamic_shapes)
    return _compiled(program, chosen)


def _compiled(program: ExportedProgram, options: CompileOptions) -> Program:
    """The captured ``program`` rewritten, scheduled, planned and verified as ``options`` ask."""
    rewrite, plan_options, asked_banks = options.rewrite, options.plan, options.banks
    if not plan_options.inputs_in_arena and asked_banks.banks is not None:
        raise InputError("compile: inputs_in_arena=False places the inputs after the one arena; "
                         "with banks=, pin each input to a bank of its own instead "
                         "(pin={'x': 'frame'})")
    candidates = Candidates(options)

    def chunked(candidate: ExportedProgram) -> tuple[ExportedProgram, Chunking]:
        with stage("chunks", candidate):
            return choose_chunks(candidate, rewrite.chunks, candidates.arena_of,
                                 grouped=options.schedule.reuse)

    patching = chunking = None
    if rewrite.chunks is not None:  # first: a patching is judged against the peak chunks leave
        program, chunking = chunked(program)
    if rewrite.patches is not None:
        with stage("patches", program):
            program, patching = choose_patches(program, rewrite.patches, rewrite.max_overhead,
                                               candidates.arena_of, candidates.planned_arena_of)
        if chunking is not None and chunking.chosen.chunks == 1 and patching.chosen.split:
            program, chunking = chunked(program)  # the patches may have left the layers' peak
    if options.schedule.reuse:  # after the chunks (a chunk of rows is no slice of a group's),
        with stage("grouped heads", program):  # which made their loops' own
            program = grouped_products(program)
    ready = candidates.prepare(program)
    roles, specs, chosen, lives = ready.roles, ready.specs, ready.chosen, ready.lives
    request = None
    if asked_banks != BankOptions():
        step_names = [n.name for n in scheduled_nodes(program.graph, chosen.order)]
        request = bank_request(program, specs, chosen, step_names, asked_banks,
                               plan_options.time_limit)
    with stage("plan", program):
        plan = _planned(lives, chosen, plan_options, request) if request is not None \
            else candidates.planned(program)
    with stage("symbolic plan", program):
        plan = with_symbolic(plan, program, specs, chosen.alias, roles)
    with stage("plan", program):  # with the symbolic plan: the largest sizes that fit
        check_arena(plan, plan_options.max_arena_bytes,
                    lambda: untried_rewrites(program, candidates, rewrite))
    if os.environ.get("TENSORPLAN_DEBUG") == "1":
        _debug_summary(specs, chosen, plan)
    with stage("alias", program):
        planned = planned_specs(specs, chosen.alias)
    return Program(program, planned, chosen.alias, plan, roles, chosen, patching, chunking,
                   options)


@dataclass(frozen=True)
class _Prepared:
    """What a compile plans from: a program's roles, specs, schedule and lifetimes."""

    roles: Roles
    specs: SpecTable
    chosen: Schedule
    lives: Mapping[str, GraphLifetimes]


class Candidates:
    """The programs a compile plans from (as exported, patched, chunked), each prepared once:
    its roles, specs, schedule and lifetimes (``prepare``), its greedy arena (``arena_of``,
    what the rewrites choose by: the inputs counted in it or not, as the compile's plan), and
    its plan by the compile's own options (``planned``, that patches rank the closest by)."""

    def __init__(self, options: CompileOptions) -> None:
        self.switches, self.plan_options = options.schedule, options.plan
        self._prepared: dict[int, tuple[ExportedProgram, _Prepared]] = {}  # id -> (it, its)
        self._planned: dict[int, MemoryPlan] = {}  # id -> its plan by the compile's options

    def prepare(self, candidate: ExportedProgram) -> _Prepared:
        """The candidate's roles, specs, schedule and lifetimes (made on first use)."""
        if id(candidate) not in self._prepared:
            self._prepared[id(candidate)] = (
                candidate, _prepare(candidate, self.switches, self.plan_options))
        return self._prepared[id(candidate)][1]

    def arena_of(self, candidate: ExportedProgram) -> int:
        """The arena tensorplan's greedy plans for the candidate."""
        ready = self.prepare(candidate)
        return _planned(ready.lives, ready.chosen, self.plan_options.drafted()).arena_bytes

    def planned(self, candidate: ExportedProgram) -> MemoryPlan:
        """The candidate's plan by the compile's plan options, without banks (made on first
        use: the one a rewrite ranked candidates by is the one the compile keeps)."""
        if id(candidate) not in self._planned:
            ready = self.prepare(candidate)
            self._planned[id(candidate)] = _planned(ready.lives, ready.chosen, self.plan_options)
        return self._planned[id(candidate)]

    def planned_arena_of(self, candidate: ExportedProgram) -> int:
        """The arena the compile's planner gives the candidate (``planned``); with
        ``algorithm="optimal"``, "auto"'s (its search of a second or so per candidate, not
        the optimal search's budget; the one kept is then planned optimally)."""
        if self.plan_options.algorithm != "optimal":
            return self.planned(candidate).arena_bytes
        ready = self.prepare(candidate)
        searched = dataclasses.replace(self.plan_options, algorithm="auto", time_limit=None)
        return _planned(ready.lives, ready.chosen, searched).arena_bytes


def untried_rewrites(program: ExportedProgram, candidates: Candidates,
                     asked: RewriteOptions) -> tuple[Rewrite, ...]:
    """What ``chunks="auto"`` and ``patches="auto"`` (it declines a program with dynamic dims)
    would plan for ``program`` (each on its own, greedy), where ``asked`` did not ask for
    them, for the rewrites they keep: what an arena over its budget suggests. A rewrite that
    raises is not suggested: the budget's error is the one the user needs."""
    found = []
    if asked.chunks is None:
        chunking = _tried("chunks", program, lambda: choose_chunks(
            program, "auto", candidates.arena_of)[1])
        if chunking is not None and chunking.chosen.chunks > 1:
            found.append(Rewrite("chunks", chunking.chosen.arena_bytes))
    if asked.patches is None:
        patching = _tried("patches", program, lambda: choose_patches(
            program, "auto", asked.max_overhead, candidates.arena_of)[1])
        if patching is not None and patching.chosen.split:
            found.append(Rewrite("patches", patching.chosen.arena_bytes))
    return tuple(found)


def _tried(name: str, program: ExportedProgram, choose: Callable[[], Any]) -> Any:
    """``choose()`` within its stage, or None when it raises tensorplan's own error."""
    try:
        with stage(name, program):
            return choose()
    except TensorPlanError:
        return None


def _prepare(program: ExportedProgram, switches: ScheduleOptions,
             plan: PlanOptions) -> _Prepared:
    """Roles, specs (checked against ``plan``'s alignment), the schedule (its arena counted as
    ``plan`` counts it) and its lifetimes."""
    with stage("roles", program):
        roles = read_roles(program)
    with stage("propagate", program):
        specs = propagate(program, roles)
    _check_alignment(plan.alignment, specs)
    with stage("schedule", program):
        chosen = schedule(program, specs, roles, switches, plan)
    with stage("liveness", program):
        lives = lifetimes(program, chosen.alias, chosen.order)
    return _Prepared(roles, specs, chosen, lives)


def _planned(lives: Mapping[str, GraphLifetimes], chosen: Schedule,
             options: PlanOptions, banks: BankRequest | None = None) -> MemoryPlan:
    """The verified plan of the scheduled lifetimes, with the schedule's figures."""
    plan = plan_memory(lives, chosen.alias, options, banks)
    return dataclasses.replace(
        plan, baseline_bound_bytes=chosen.baseline_bound_bytes, order=chosen.order_name,
        constant_bytes=chosen.constant_bytes,
        baseline_constant_bytes=chosen.baseline_constant_bytes)


def _debug_summary(specs: SpecTable, chosen: Schedule, plan: MemoryPlan) -> None:
    """The one ``TENSORPLAN_DEBUG=1`` line a compile prints on stderr."""
    print(f"tensorplan: {len(specs)} values, {len(plan.storages)} storages, arena "
          f"{plan.arena_bytes} B, lower bound {plan.lower_bound_bytes} B (baseline "
          f"{plan.baseline_bound_bytes} B), {plan.order} order, {len(chosen.reuses)} "
          f"reuses, {len(chosen.folded.computed)} folded, "
          f"{plan.algorithm}{' (optimal)' if plan.optimal else ''}", file=sys.stderr)


def load(path: str | os.PathLike[str]) -> Program:
    """The program a file written by ``Program.save`` holds: its saved plan, not re-planned.

    Raises ``FormatError`` for a truncated, corrupted or foreign file, a file of another
    format version, or a plan that does not fit the embedded program.
    """
    with stage("load"):
        parts = read_artifact(path)
    return Program(parts.exported_program, parts.specs, parts.schedule.alias, parts.plan,
                   parts.roles, parts.schedule, options=parts.options)
