"""A loop's stacked outputs sized as its results, in an emitted ExecuTorch program.

ExecuTorch 1.5.1's emitter runs a ``scan`` as a loop whose every iteration copies its result
into slice ``i`` of the stacked output with ``executorch_prim::et_copy_index``. That kernel
only ever grows the stacked tensor's first dim and requires its other dims to equal the
result's. A result of static sizes always does; a result whose sizes change from one call to
the next (a chunk of ``ceil(S / n)`` rows, ``rewrite/loop.py``) does not: the stacked tensor
starts at its upper-bound sizes and keeps the last call's. :func:`size_stacked_outputs` sizes
the stacked tensor as the slices copied so far before each copy, from the result's sizes at
run time; :func:`with_stacked_outputs_sized` does it to a lowered program and serializes it
again.
"""

from __future__ import annotations

from typing import Any

_COPY_INDEX = "executorch_prim::et_copy_index"
_EMPTY = ("aten::empty", "out")
_SYM_SIZE = ("aten::sym_size", "int")


def with_stacked_outputs_sized(manager: Any, config: Any) -> Any:
    """``manager`` (an ``ExecutorchProgramManager`` lowered with ``config``) with
    :func:`size_stacked_outputs` done to its program, serialized again where it changed
    (ExecuTorch serializes a program as the manager is made)."""
    from tensorplan.integrations.executorch.private import serialize_again

    if size_stacked_outputs(manager.executorch_program):
        serialize_again(manager, config)
    return manager


def size_stacked_outputs(program: Any) -> int:
    """Before each ``et_copy_index`` of ``program`` (an emitted ExecuTorch ``Program``, changed
    in place) that copies a result of dynamic sizes, size the stacked output as the slices
    copied so far: ``[i, *result.sizes()]`` (``aten::sym_size`` of each of the result's dims,
    then ``aten::empty.out``, which resizes and keeps the data of a bounded tensor). The copy
    then grows it by one slice, its other dims the result's. Jumps past an instruction put
    before are moved with it. Returns how many copies were prepared so."""
    from executorch.exir.schema import JumpFalseCall, KernelCall, TensorShapeDynamism

    done = 0
    for plan in program.execution_plan:
        for chain in plan.chains:
            for index in reversed(range(len(chain.instructions))):
                call = chain.instructions[index].instr_args
                if not isinstance(call, KernelCall) or \
                        plan.operators[call.op_index].name != _COPY_INDEX:
                    continue
                stacked, result, position = call.args[:3]
                if plan.values[result].val.shape_dynamism == TensorShapeDynamism.STATIC:
                    continue
                sizing = _sized_as(plan, stacked, result, position)
                for instruction in chain.instructions:
                    jump = instruction.instr_args
                    if isinstance(jump, JumpFalseCall) and jump.destination_instruction > index:
                        jump.destination_instruction += len(sizing)
                chain.instructions[index:index] = sizing
                done += 1
    return done


def _sized_as(plan: Any, stacked: int, result: int, position: int) -> list[Any]:
    """``stacked`` resized to ``[position, *result.sizes()]``."""
    from executorch.exir.schema import Instruction, Int, IntList, KernelCall, Null

    sizes, calls = [position], []
    for dim in range(len(plan.values[result].val.sizes)):
        size = _new_value(plan, Int(0))
        calls.append(KernelCall(op_index=_operator(plan, _SYM_SIZE),
                                args=[result, _new_value(plan, Int(dim)), size]))
        sizes.append(size)
    calls.append(KernelCall(op_index=_operator(plan, _EMPTY),
                            args=[_new_value(plan, IntList(sizes)), _new_value(plan, Null()),
                                  stacked, stacked]))
    return [Instruction(call) for call in calls]


def _new_value(plan: Any, value: Any) -> int:
    """The index of a new value of ``plan`` holding ``value``."""
    from executorch.exir.schema import EValue

    plan.values.append(EValue(value))
    return len(plan.values) - 1


def _operator(plan: Any, name: tuple[str, str]) -> int:
    from executorch.exir.schema import Operator

    for index, operator in enumerate(plan.operators):
        if (operator.name, operator.overload) == name:
            return index
    plan.operators.append(Operator(name=name[0], overload=name[1]))
    return len(plan.operators) - 1
