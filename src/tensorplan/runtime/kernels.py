"""Finding the ATen out-variant of an operator from its schema.

An out-variant of a functional op takes the same arguments (same names *and* types, so
``le.Scalar`` never picks ``le.Tensor_out``) plus one ``Tensor(x!)`` out argument per return. The
tensor-options arguments of factory ops (``dtype``, ``layout``, ``device``, ``pin_memory``) may be
missing from it: the out tensor carries them.

Some out-variants are *generated* by ATen (``autogen:`` in ``native_functions.yaml``, which ships
with torch in ``torchgen``): they run the functional op and copy, so they allocate. They are
marked, so the runtime can avoid them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tensorplan.ops.schemas import signature

_TENSOR_OPTIONS = frozenset({"dtype", "layout", "device", "pin_memory"})


@dataclass(frozen=True)
class OutVariant:
    """How to call an op so that it writes into preallocated tensors."""

    op: torch._ops.OpOverload       # the out overload
    out_names: tuple[str, ...]       # keyword names of its out arguments, one per return
    dropped: tuple[str, ...]         # functional arguments it does not take (tensor options)
    generated: bool = False          # ATen generated it: functional op + copy (it allocates)


def _matches(functional: torch._ops.OpOverload,
             candidate: torch._ops.OpOverload) -> OutVariant | None:
    schema = candidate._schema
    outs = [a for a in schema.arguments if a.is_out]
    if not outs or len(outs) != len(functional._schema.returns):
        return None
    inputs = signature(a for a in schema.arguments if not a.is_out)
    wanted = signature(functional._schema.arguments)
    dropped = tuple(name for name, _ in wanted
                    if name in _TENSOR_OPTIONS and name not in {n for n, _ in inputs})
    if [w for w in wanted if w[0] not in dropped] != inputs:
        return None
    qualified = f"{candidate._schema.name.partition('::')[2]}.{candidate._schema.overload_name}"
    return OutVariant(candidate, tuple(a.name for a in outs), dropped,
                      qualified in generated_out_variants())


def _copy_of_self(out: torch.Tensor, self: torch.Tensor, *args, **kwargs) -> None:
    out.copy_(self)


def _fill_with_value(out: torch.Tensor, self: torch.Tensor, fill_value, *args, **kwargs) -> None:
    out.fill_(fill_value)


def _fill_with_scalar(out: torch.Tensor, value, *args, **kwargs) -> None:
    out.fill_(value)


def _embedding_rows(out: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                    *args, **kwargs) -> None:
    rows = out.view(-1, weight.shape[1])  # out is dense in its planned (row-major) layout
    torch.index_select(weight, 0, indices.reshape(-1), out=rows)


def _batch_norm_into(outs: tuple, x: torch.Tensor, weight, bias, mean, var, momentum: float,
                     eps: float) -> None:
    out, save_mean, save_invstd = outs  # inference: the saved statistics are empty
    torch.ops.aten.native_batch_norm.out(x, weight, bias, mean, var, False, momentum, eps,
                                         out=out, save_mean=save_mean, save_invstd=save_invstd)


_ATEN = torch.ops.aten
# Native kernels for the commonest ops whose ATen out-variant is generated (and so allocates):
# op -> kernel(out, *args, **kwargs) writing the op's result into ``out``, which already has the
# planned shape, dtype and layout (so ``clone``'s memory_format and ``_to_copy``'s dtype are
# carried by ``out``). Inference batch norm runs through ``native_batch_norm.out``, which may
# write over its input (reuse.py).
NATIVE_INTO: dict[torch._ops.OpOverload, Callable[..., None]] = {
    _ATEN.clone.default: _copy_of_self,
    _ATEN._to_copy.default: _copy_of_self,
    _ATEN.full_like.default: _fill_with_value,
    _ATEN.scalar_tensor.default: _fill_with_scalar,
    _ATEN.embedding.default: _embedding_rows,
    _ATEN._native_batch_norm_legit_no_training.default: _batch_norm_into,
}


_AUTOGEN = re.compile(r"^\s+autogen:\s*(.+)$", re.MULTILINE)


@functools.cache
def generated_out_variants() -> frozenset[str]:
    """Names (``op.overload``) of the out-variants ATen generates from functional ops.

    Read from the ``native_functions.yaml`` packaged with torch's ``torchgen``; empty when that
    file is absent (then every out-variant is taken as native).

    >>> "clone.out" in generated_out_variants(), "addmm.out" in generated_out_variants()
    (True, False)
    """
    try:
        import torchgen
    except ImportError:
        return frozenset()
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / \
        "native_functions.yaml"
    if not path.is_file():
        return frozenset()
    text = path.read_text(encoding="utf-8")
    return frozenset(name.strip() for line in _AUTOGEN.findall(text) for name in line.split(","))


@functools.cache
def out_variant(op: torch._ops.OpOverload) -> OutVariant | None:
    """The out-variant of ``op``, or None when ATen has none, or none with a kernel here (an
    ExecuTorch Cortex-M kernel's ``.out`` is a schema only: its kernel is in the device's
    runtime, and the functional op's reference implementation runs instead).

    >>> out_variant(torch.ops.aten.le.Scalar).op
    <OpOverload(op='aten.le', overload='Scalar_out')>
    >>> out_variant(torch.ops.aten.max.dim).out_names
    ('max', 'max_values')
    """
    if any(a.is_out for a in op._schema.arguments):
        return None
    packet = op.overloadpacket
    for name in packet.overloads():
        found = _matches(op, getattr(packet, name))
        if found is not None and _has_cpu_kernel(found.op):
            return found
    return None


_CPU_KEYS = ("CPU", "CompositeExplicitAutograd", "CompositeImplicitAutograd")


def _has_cpu_kernel(op: torch._ops.OpOverload) -> bool:
    """A kernel is registered for ``op`` that runs on this CPU.

    >>> _has_cpu_kernel(torch.ops.aten.add.out)
    True
    """
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key) for key in _CPU_KEYS)


