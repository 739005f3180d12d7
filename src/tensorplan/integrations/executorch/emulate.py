"""A ``.pte`` run from its bytes without ExecuTorch's runtime, its memory plan kept.

:func:`emulate_pte` reads the program from the ``.pte`` (ExecuTorch's own deserializer), holds
one buffer per planned memory id at the sizes the program declares, places every planned tensor
at its offset in its buffer with its dim order, and runs the instructions in order, each kernel
call through the operator's Python implementation (for ``cortex_m::`` kernels, the reference
implementations ExecuTorch's Cortex-M backend registers) with its result written into the
tensor the plan gave it. Two tensors the plan lets overlap while both are live corrupt each
other here as on a device, so outputs equal to the program's edge form are a check of the plan
the ``.pte`` carries, for a program whose kernels ExecuTorch's pip runtime lacks (a Cortex-M
program: ``Missing operator: cortex_m::...``). A kernel's own in-place hazards are not: the
Python implementation computes its result whole before it is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tensorplan.errors import InputError, ShipError, TensorPlanError
from tensorplan.integrations.executorch.check import torch_dtype
from tensorplan.specs.layout import dense_strides


@dataclass(frozen=True)
class _Indices:
    """A list value of the program: the indices of the values it holds, read when called."""

    items: tuple[int, ...]


def emulate_pte(pte: bytes | str | Path, inputs: Sequence[torch.Tensor], *,
                method: str = "forward") -> list[Any]:
    """The outputs of ``method`` of the ``.pte`` (its bytes, or a path) run on the flat
    ``inputs`` as described in the module docstring, as tensors that own their memory.
    Raises :class:`InputError` when the inputs are not as many as the method takes, and
    :class:`ShipError` naming the instruction when one cannot be run here (a delegate call, a
    jump, an operator with no Python implementation registered, such as ExecuTorch's
    ``et_view`` of a dynamic shape: the emulator runs programs of static shapes)."""
    try:
        from tensorplan.integrations.executorch.private import deserialize_pte
    except ImportError as error:
        raise TensorPlanError("emulating a .pte needs executorch: "
                              "pip install tensorplan[executorch]") from error
    data = Path(pte).read_bytes() if isinstance(pte, (str, Path)) else bytes(pte)
    program = deserialize_pte(data)
    plans = {plan.name: plan for plan in program.execution_plan}
    if method not in plans:
        raise ShipError(f"emulate_pte: the .pte has no method {method!r}; it has "
                        f"{', '.join(sorted(plans))}")
    plan = plans[method]
    memory = [torch.zeros(size, dtype=torch.uint8) for size in plan.non_const_buffer_sizes]
    values = [_value(v.val, memory, program.constant_buffer) for v in plan.values]
    if len(inputs) != len(plan.inputs):
        raise InputError(f"emulate_pte: the .pte's {method} takes {len(plan.inputs)} inputs, "
                         f"got {len(inputs)}; pass its user inputs in order, flat")
    for index, given in zip(plan.inputs, inputs, strict=True):
        if isinstance(values[index], torch.Tensor):
            values[index].copy_(given)
        else:
            values[index] = given
    for step, instruction in enumerate(plan.chains[0].instructions):
        _run(instruction.instr_args, plan, values, f"{method} instruction {step}")
    return [o.clone() if isinstance(o, torch.Tensor) else o
            for o in (values[index] for index in plan.outputs)]


def _value(value: Any, memory: list[torch.Tensor], constants: Sequence[Any]) -> Any:
    """What an ``EValue`` holds: a tensor placed in its planned buffer or over its constant
    bytes (None for one neither planned nor constant: an unplanned input or a view the
    program binds when it runs), a scalar, or the indices of a list's values."""
    kind = type(value).__name__
    if kind == "Tensor":
        details = value.allocation_info
        if details is not None:
            offset = details.memory_offset_low + (details.memory_offset_high << 32)
            return _placed(memory[details.memory_id], offset, value)
        if value.data_buffer_idx > 0:
            data = bytearray(constants[value.data_buffer_idx].storage)
            storage = torch.frombuffer(data, dtype=torch.uint8) if data else \
                torch.empty(0, dtype=torch.uint8)
            return _placed(storage, 0, value)
        return None
    if kind in ("IntList", "TensorList", "OptionalTensorList"):
        return _Indices(tuple(value.items))
    if kind in ("DoubleList", "BoolList"):
        return list(value.items)
    return {"Int": lambda: value.int_val, "Bool": lambda: value.bool_val,
            "Double": lambda: float(value.double_val), "String": lambda: value.string_val,
            "Null": lambda: None}[kind]()


def _placed(storage: torch.Tensor, offset: int, tensor: Any) -> torch.Tensor:
    """The tensor ``tensor`` (an ExecuTorch ``Tensor``) describes, viewing ``storage``'s bytes
    from ``offset``: its sizes laid out in its dim order."""
    dtype, shape = torch_dtype(int(tensor.scalar_type)), list(tensor.sizes)
    order = list(tensor.dim_order) or list(range(len(shape)))
    flat = storage[offset:offset + math.prod(shape) * dtype.itemsize].view(dtype)
    return flat.as_strided(shape, dense_strides(shape, order))


def _resolved(value: Any, values: list[Any]) -> Any:
    """A value as an operator takes it: lists of value indices read at call time."""
    if isinstance(value, _Indices):
        return [values[index] for index in value.items]
    return value


def _run(call: Any, plan: Any, values: list[Any], where: str) -> None:
    """Run one instruction: a kernel call through its operator's Python implementation, a
    move, or a free (nothing to do: the plan owns the memory)."""
    kind = type(call).__name__
    if kind == "FreeCall":
        return
    if kind == "MoveCall":
        values[call.move_to] = values[call.move_from]
        return
    if kind != "KernelCall":
        raise ShipError(f"emulate_pte: {where} is a {kind}, which is not emulated (only kernel "
                        "calls, moves and frees are); run the .pte in a runtime that has its "
                        "delegates and control flow")
    operator = plan.operators[call.op_index]
    name = f"{operator.name}.{operator.overload}" if operator.overload else operator.name
    schema, functional = _overloads(operator.name, operator.overload, where)
    taken = call.args[:len(schema.arguments)]  # the emitter lists the outs again as returns
    keywords, outs = {}, []
    for argument, index in zip(schema.arguments, taken, strict=True):
        if argument.is_out:
            outs.append(index)
        else:
            keywords[argument.name] = _typed(str(argument.type), _resolved(values[index], values))
    try:
        result = functional(**keywords)
    except Exception as error:  # the kernel's own refusal, named with its instruction
        raise ShipError(f"emulate_pte: {where} ({name}) failed: {error}") from error
    results = result if isinstance(result, (tuple, list)) else (result,)
    for index, produced in zip(outs, results, strict=True):
        _write(values, index, produced, where, name)


def _write(values: list[Any], index: int, produced: torch.Tensor, where: str,
           name: str) -> None:
    """Write a kernel's result into its planned tensor (bound as it is when the plan gave it
    no memory)."""
    out = values[index]
    if out is None:
        values[index] = produced
        return
    if out.shape != produced.shape:
        raise ShipError(f"emulate_pte: {where} ({name}) made a {list(produced.shape)} result "
                        f"for a tensor planned {list(out.shape)}; the emulator runs programs "
                        "of static shapes")
    out.copy_(produced)


def _typed(kind: str, value: Any) -> Any:
    """A value as the Python operator takes it: a dtype, which the ``.pte`` stores as its
    ``ScalarType`` number, made a ``torch.dtype``."""
    if "ScalarType" in kind and isinstance(value, int) and not isinstance(value, bool):
        return torch_dtype(value)
    return value


def _overloads(name: str, overload: str, where: str) -> tuple[Any, Any]:
    """The out variant's schema of operator ``name`` (``namespace::op``) and the functional
    overload that takes its arguments (and others only with defaults), whose Python
    implementation computes the result."""
    namespace, _, op = name.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        out_variant = getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise ShipError(f"emulate_pte: {where} calls {name}.{overload}, which has no Python "
                        "registration here; import the module that defines it (Cortex-M "
                        "kernels: executorch.backends.cortex_m.ops.operators)") from None
    schema = out_variant._schema
    taken = {a.name: str(a.type) for a in schema.arguments if not a.is_out}
    for candidate in packet.overloads():
        functional = getattr(packet, candidate)
        arguments = functional._schema.arguments
        if any(a.is_out for a in arguments):
            continue
        # the out variant may drop arguments its out tensor answers (a dtype): they default
        if all(taken.get(a.name) == str(a.type) or (a.name not in taken and a.has_default_value())
               for a in arguments) and set(taken) <= {a.name for a in arguments}:
            return schema, functional
    raise ShipError(f"emulate_pte: {where} calls {name}.{overload}, which has no functional "
                    "overload of the same arguments to compute it with")
