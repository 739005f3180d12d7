"""What every placeholder and output of a program is, read once from its graph signature.

The signature (``InputKind``/``OutputKind``) says whether a placeholder is a user input, a
parameter, a buffer or a lifted constant, and which outputs write a new value into a buffer or
a user input. Every stage reads those facts from the one frozen ``Roles`` table made here.

Worked example: a module with a weight, a running counter it increments, and input ``x`` gives

    p_weight   PARAMETER   (target "weight")
    b_count    STATE       (target "count"; updated by output "add")
    x          USER_INPUT
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind


class Role(enum.Enum):
    """What one placeholder of a program holds."""

    USER_INPUT = "user input"        # passed by the caller at every run
    MUTATED_INPUT = "mutated input"  # a user input the program writes a new value into
    PARAMETER = "parameter"          # a weight: constant, not in the arena
    BUFFER = "buffer"                # a buffer the program never writes: constant
    CONSTANT = "constant"            # a lifted tensor constant
    STATE = "state"                  # a buffer the program writes: keeps its value across runs
    OTHER = "other"                  # a token or a custom object (no tensor to plan)


CONSTANT_ROLES = frozenset({Role.PARAMETER, Role.BUFFER, Role.CONSTANT})
STATE_ROLES = frozenset({Role.STATE, Role.MUTATED_INPUT})


@dataclass(frozen=True)
class Roles:
    """The role of every placeholder and what every output updates."""

    role_of: Mapping[str, Role]             # placeholder name -> role
    target_of: Mapping[str, str]            # placeholder -> its key in state_dict / constants
    user_inputs: tuple[str, ...]            # user-input placeholders in call order
    specialised: Mapping[str, Any]          # user input -> the non-tensor value it was fixed to
    output_updates: tuple[str | None, ...]  # per graph output: the placeholder it writes, or
    #                                         None for an output the caller receives
    updates: Mapping[str, str]              # output value name -> the placeholder it writes

    @property
    def constants(self) -> frozenset[str]:
        """Placeholders whose value never changes: parameters, unwritten buffers, constants."""
        return frozenset(n for n, role in self.role_of.items() if role in CONSTANT_ROLES)

    @property
    def state(self) -> frozenset[str]:
        """Placeholders the program writes: mutated buffers and mutated user inputs."""
        return frozenset(n for n, role in self.role_of.items() if role in STATE_ROLES)

    @property
    def state_buffers(self) -> dict[str, str]:
        """Placeholder -> buffer name, for every mutated buffer."""
        return {n: self.target_of[n] for n, role in self.role_of.items() if role is Role.STATE}


_INPUT_ROLES = {InputKind.USER_INPUT: Role.USER_INPUT, InputKind.PARAMETER: Role.PARAMETER,
                InputKind.BUFFER: Role.BUFFER, InputKind.CONSTANT_TENSOR: Role.CONSTANT}
_UPDATES = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)


def read_roles(program: ExportedProgram) -> Roles:
    """The ``Roles`` of ``program``, from its graph signature alone."""
    signature = program.graph_signature
    written = {spec.target for spec in signature.output_specs if spec.kind in _UPDATES}
    role_of: dict[str, Role] = {}
    target_of: dict[str, str] = {}
    for spec in signature.input_specs:
        name = spec.arg.name
        role = _INPUT_ROLES.get(spec.kind, Role.OTHER)
        if role is Role.BUFFER and spec.target in written:
            role = Role.STATE
        elif role is Role.USER_INPUT and name in written:
            role = Role.MUTATED_INPUT
        role_of[name] = role
        if spec.target is not None:
            target_of[name] = spec.target
    placeholder_of = {target: name for name, target in target_of.items()}
    output_updates = tuple(
        None if spec.kind not in _UPDATES else
        placeholder_of[spec.target] if spec.kind == OutputKind.BUFFER_MUTATION else spec.target
        for spec in signature.output_specs)
    updates = {spec.arg.name: written for spec, written in
               zip(signature.output_specs, output_updates, strict=True) if written is not None}
    user_inputs = tuple(spec.arg.name for spec in signature.input_specs
                        if spec.kind == InputKind.USER_INPUT)
    specialised = {spec.arg.name: spec.arg.value for spec in signature.input_specs
                   if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument)}
    return Roles(role_of, target_of, user_inputs, specialised, output_updates, updates)
