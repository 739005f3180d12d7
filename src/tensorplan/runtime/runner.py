"""Stage 5: run a planned program out of its one arena, like a device runtime.

A ``Runner`` owns the arena (allocated once), the mutable state kept in it across runs, and its
``RunStats``. Inputs are checked and copied into their planned views (in their planned layout),
kernels write into planned views, and outputs come back in the model's own structure. The
state updates are the ones alias analysis decided (``AliasTable.write_back``): a new state
value that shares its buffer's storage is already in place; the others are copied back after
the run, every value read before any is written.

Runs on one runner are serialised (a lock); different runners share nothing and run in
parallel.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch.export import ExportedProgram
from torch.utils import _pytree as pytree

from tensorplan.analysis.alias import AliasTable
from tensorplan.errors import InputError
from tensorplan.frontend.fake import program_shape_env
from tensorplan.frontend.roles import Role, Roles
from tensorplan.internal import stage
from tensorplan.ops.control_flow import assign
from tensorplan.plan.plan import MemoryPlan
from tensorplan.runtime.arena import Arena
from tensorplan.runtime.frames import Views
from tensorplan.runtime.graph import GraphRunner
from tensorplan.runtime.inputs import bind_inputs, flatten_inputs
from tensorplan.runtime.lower import ProgramFacts
from tensorplan.runtime.steps import RunStats, StepContext
from tensorplan.schedule.fold import Folded, constant_tensors
from tensorplan.specs.spec import SpecTable


def _lowest(plan: MemoryPlan) -> dict[str, int]:
    """Every dim of a symbolic plan at its lower bound."""
    return {d.name: d.lower for d in plan.symbolic.dims}


def _state_stays(plan: MemoryPlan) -> bool:
    """True when every mutated state storage has one offset at every size (the symbolic plan
    puts state first), so a grown arena keeps it in place."""
    sym = plan.symbolic
    return all(sym.offsets[s.id].is_constant for s in plan.storages.values() if s.kind == "state")


class Update(enum.Enum):
    """What a run does with one graph output."""

    RETURN = "return"      # hand it to the caller
    INPUT = "input"        # copy it into the caller's (mutated) input tensor
    STATE = "state"        # copy it back into its buffer's storage
    IN_PLACE = "in place"  # nothing: the new state was computed in its buffer's storage


class PlannedProgram(Protocol):
    """What a runner runs: a program with its tables and verified plan (``tp.Program``)."""

    @property
    def exported_program(self) -> ExportedProgram: ...  # the core-ATen program
    @property
    def specs(self) -> SpecTable: ...                   # every value's spec
    @property
    def alias(self) -> AliasTable: ...                  # which values share storage
    @property
    def plan(self) -> MemoryPlan: ...                   # offsets of every storage
    @property
    def roles(self) -> Roles: ...                       # what each placeholder and output is
    @property
    def folded(self) -> Folded: ...                     # values computed at compile time
    @property
    def order(self) -> Sequence[str] | None: ...        # top-level run order (None: graph's)


class Runner:
    """Runs one planned program out of its own arena, one call at a time."""

    @stage("runtime lowering")
    def __init__(self, planned: PlannedProgram, arena: str = "grow") -> None:
        """``arena``: "grow" (the default) starts at the smallest sizes' arena and grows it
        to what the largest sizes run so far need, keeping the state: it measured as fast as
        or faster than "upper" at 21 of 27 sizes (``bench_symbolic.py``: a smaller arena is
        warmer in cache), and a growth costs one lowering more (about 4 ms on GPT-2) beside
        the frame any new size builds; "upper" allocates the arena at the dims' upper bounds
        once. A static plan has one size: both are the same."""
        if arena not in ("upper", "grow"):
            raise InputError(f"runtime: arena must be 'upper' or 'grow', got {arena!r}")
        program, roles, plan, folded = (planned.exported_program, planned.roles, planned.plan,
                                        planned.folded)
        self.program, self.roles, self.plan, self.order = program, roles, plan, planned.order
        call_spec = program.call_spec  # built anew on each access: read it once
        self.in_spec, self.out_spec = call_spec.in_spec, call_spec.out_spec
        leaves = self.in_spec.num_leaves
        self.positional = pytree.tree_flatten((tuple(range(leaves)), {}))[1] == self.in_spec
        _, self.shape_env = program_shape_env(program)
        self.facts = ProgramFacts.of(planned.specs, roles, folded, planned.alias.slices)
        self.stats = RunStats()
        self.grows = arena == "grow" and plan.symbolic is not None and _state_stays(plan)
        self.constants = {**constant_tensors(program, roles), **folded.kept}
        self._build(Arena(plan.at(**_lowest(plan)).buffer_bytes if self.grows
                          else plan.buffer_bytes))
        slot_of = {node.name: slot for node, slot in self.graph.slots.items()}
        self.input_slots = [slot_of[name] for name in roles.user_inputs]
        self.state_slots = {buffer: slot_of[placeholder]
                            for placeholder, buffer in roles.state_buffers.items()}
        self.updates = self._updates(planned.alias, slot_of)
        self._lock = threading.Lock()
        self._running = stage("run", program,
                              unless="the model itself fails on these inputs in eager")
        self._initial_state()

    def _build(self, arena: Arena) -> None:
        """Lower the graph over ``arena`` (its frames are built anew on first use)."""
        self.arena, self.views = arena, Views(self.facts, self.plan, arena)
        context = StepContext(self.views, self.constants, self.shape_env, self.stats)
        self.graph = GraphRunner(self.program.graph_module, "", context, self.order)

    def _fit(self, bindings: Mapping) -> None:
        """Grow the arena to what these sizes need, keeping its bytes (the state's)."""
        needed = self.views.plan_at(bindings).buffer_bytes
        if needed <= self.arena.nbytes:
            return
        grown = Arena(needed)
        grown.bytes[:self.arena.bytes.numel()].copy_(self.arena.bytes)
        self._build(grown)

    def _updates(self, alias: AliasTable,
                 slot_of: Mapping[str, int]) -> list[tuple[Update, int | None]]:
        """Per graph output, what the run does with it: (RETURN, None), (INPUT, its index
        among the user inputs), (STATE, the state's slot) for a value copied back, or
        (IN_PLACE, None) for a new state already in its buffer."""
        copied = {value for value, _ in alias.write_back}
        outputs = self.program.graph.output_node().args[0]
        updates: list[tuple[Update, int | None]] = []
        for node, placeholder in zip(outputs, self.roles.output_updates, strict=True):
            if placeholder is None:
                updates.append((Update.RETURN, None))
            elif self.roles.role_of[placeholder] is Role.MUTATED_INPUT:
                updates.append((Update.INPUT, self.roles.user_inputs.index(placeholder)))
            elif node.name in copied:
                updates.append((Update.STATE, slot_of[placeholder]))
            else:
                updates.append((Update.IN_PLACE, None))
        return updates

    def _static_bindings(self) -> dict:
        """Any valid bindings: state storages do not depend on input sizes (a growing arena
        is grown to hold them)."""
        bindings = {s: int(self.shape_env.bound_sympy(s).lower) for s in self.facts.backed}
        if self.grows:
            self._fit(bindings)
        return bindings

    @torch.no_grad()
    def _initial_state(self) -> None:
        if not self.state_slots:
            return
        bindings = self._static_bindings()  # first: it may grow the arena and lower anew
        frame = self.graph.frame(bindings)
        tables = {**self.program.state_dict, **self.program.constants}
        for target, slot in self.state_slots.items():
            frame[slot].copy_(tables[target])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current values of the mutated buffers (copies), by buffer name."""
        with self._lock:
            bindings = self._static_bindings()
            frame = self.graph.frame(bindings)
            return {target: frame[slot].clone() for target, slot in self.state_slots.items()}

    @torch.no_grad()
    def run(self, *args: Any, copy_outputs: bool = True, **kwargs: Any) -> Any:
        """Run on user inputs; return the user outputs in the model's structure.

        With ``copy_outputs=False`` the outputs are views into the arena, valid until the next
        run. Raises ``InputError`` for inputs that do not match the compiled signature or
        whose values an op refuses as eager does (an index out of range: ``refusals.py``), and
        ``InternalError`` (naming the node) when a step fails on inputs that passed the checks.
        """
        if self.positional and not kwargs and len(args) == len(self.roles.user_inputs):
            flat = list(args)  # plain positional inputs: no pytree walk
        else:
            flat = flatten_inputs(self.in_spec, args, kwargs)
        with self._lock, self._running:
            bindings = bind_inputs(self.program, self.roles, flat, self.facts)
            if self.grows:
                self._fit(bindings)
            frame = self.graph.frame(bindings)
            for slot, value in zip(self.input_slots, flat, strict=True):
                if isinstance(value, torch.Tensor):
                    frame[slot].copy_(value)  # into the planned layout, never reinterpreted
            outputs = self.graph.run([], bindings)
            results = self._finish(outputs, flat, frame, copy_outputs)
            self.stats.runs += 1
            return results

    def _finish(self, outputs: list, flat: list, frame: list, copy_outputs: bool) -> Any:
        results, targets, values = [], [], []
        for value, (kind, where) in zip(outputs, self.updates, strict=True):
            if kind is Update.RETURN:
                results.append(value.clone() if copy_outputs and isinstance(value, torch.Tensor)
                               else value)
            elif kind is Update.INPUT:
                targets.append(flat[where])
                values.append(value)
            elif kind is Update.STATE:
                targets.append(frame[where])
                values.append(value)
        assign(targets, values)
        return pytree.tree_unflatten(results, self.out_spec)
