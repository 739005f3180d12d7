"""Stage 5: run a compiled program out of its one arena, like a device runtime.

Inputs are checked and copied into their planned views (in their planned layout), kernels write
into planned views, mutated buffers keep their state in their storage across runs, and outputs
are returned in the model's own structure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.utils import _pytree as pytree

from ..alias import AliasTable
from ..plan import MemoryPlan
from ..spec import SpecTable, TensorSpec
from ..trace import program_shape_env
from .arena import Arena
from .control_flow import CONTROL_FLOW, assign
from .graph import GraphRunner, RunContext
from .inputs import bind_inputs, flatten_inputs, specialised_arguments, user_input_names


def _constants(program: ExportedProgram) -> dict[str, torch.Tensor]:
    signature = program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    tables = {**program.state_dict, **program.constants}
    sources = {**signature.inputs_to_parameters, **signature.inputs_to_lifted_tensor_constants,
               **{k: v for k, v in signature.inputs_to_buffers.items() if v not in mutated}}
    return {name: tables[target] for name, target in sources.items()}


def _state_buffers(program: ExportedProgram) -> dict[str, str]:
    """Placeholder name -> buffer name, for mutated buffers."""
    signature = program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    return {name: target for name, target in signature.inputs_to_buffers.items()
            if target in mutated}


class Executor:
    """Runs one program; owns the arena (allocated once) and the mutable state in it."""

    def __init__(self, program: ExportedProgram, specs: SpecTable, alias: AliasTable,
                 plan: MemoryPlan) -> None:
        self.program = program
        signature = program.graph_signature
        self.user_inputs = user_input_names(signature)
        self.specialised_arguments = specialised_arguments(signature)
        call_spec = program.call_spec  # built anew on each access: read it once
        self.in_spec, self.out_spec = call_spec.in_spec, call_spec.out_spec
        leaves = self.in_spec.num_leaves
        self.positional = pytree.tree_flatten((tuple(range(leaves)), {}))[1] == self.in_spec
        _, shape_env = program_shape_env(program)
        self.ctx = RunContext(specs, alias, plan, Arena(plan.arena_bytes), _constants(program),
                              shape_env, ())
        self.input_shapes = {n: self.ctx.shape(n, None) for n in self.user_inputs
                             if isinstance(specs.get(n), TensorSpec)}
        self.ctx.backed = tuple(sorted({s for shape in self.input_shapes.values()
                                        for s in shape.symbols}, key=str))
        self.runner = GraphRunner(program.graph_module, "", self.ctx, CONTROL_FLOW)
        slot_of = {node.name: self.runner.slots[node] for node in self.runner.nodes}
        self.input_slots = [slot_of[name] for name in self.user_inputs]
        self.state_slots = {target: slot_of[name]
                            for name, target in _state_buffers(program).items()}
        self.outputs = [(spec.kind, spec.target) for spec in signature.output_specs]
        self._initial_state()

    def _static_bindings(self) -> dict:
        """Any valid bindings: state storages do not depend on input sizes."""
        return {s: int(self.ctx.shape_env.bound_sympy(s).lower) for s in self.ctx.backed}

    @torch.no_grad()
    def _initial_state(self) -> None:
        frame = self.runner.frame(self._static_bindings())
        tables = {**self.program.state_dict, **self.program.constants}
        for target, slot in self.state_slots.items():
            frame[slot].copy_(tables[target])

    @property
    def fallbacks(self) -> Counter:
        """Op name -> number of functional fallbacks run so far."""
        return self.ctx.fallbacks

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current values of the mutated buffers (copies), by buffer name."""
        frame = self.runner.frame(self._static_bindings())
        return {target: frame[slot].clone() for target, slot in self.state_slots.items()}

    @torch.no_grad()
    def run(self, args: tuple, kwargs: Mapping[str, Any], copy_outputs: bool = True) -> Any:
        """Run on user inputs; return the user outputs in the model's structure."""
        if self.positional and not kwargs and len(args) == len(self.user_inputs):
            flat = list(args)  # plain positional inputs: no pytree walk
        else:
            flat = flatten_inputs(self.in_spec, args, kwargs)
        bindings = bind_inputs(self.program, self.user_inputs, flat, self.ctx.specs,
                               self.input_shapes, self.specialised_arguments)
        frame = self.runner.frame(bindings)
        for slot, value in zip(self.input_slots, flat, strict=True):
            if isinstance(value, torch.Tensor):
                frame[slot].copy_(value)  # into the planned layout, never reinterpreted
        outputs = self.runner.run([], bindings)
        return self._finish(outputs, flat, frame, copy_outputs)

    def _finish(self, outputs: list, flat: list, frame: list, copy_outputs: bool) -> Any:
        results, writes = [], []
        for value, (kind, target) in zip(outputs, self.outputs, strict=True):
            if kind == OutputKind.BUFFER_MUTATION:
                writes.append((frame[self.state_slots[target]], value))
            elif kind == OutputKind.USER_INPUT_MUTATION:
                writes.append((flat[self.user_inputs.index(target)], value))
            else:
                results.append(value.clone() if copy_outputs and isinstance(value, torch.Tensor)
                               else value)
        # all at once: a value in another state's memory (a, b = b, a) is read before any write
        pending = [(state, new) for state, new in writes if new.data_ptr() != state.data_ptr()]
        assign([state for state, _ in pending], [new for _, new in pending])
        return pytree.tree_unflatten(results, self.out_spec)
