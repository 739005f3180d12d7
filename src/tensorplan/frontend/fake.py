"""Where a captured program's traced values live (their fake mode and ShapeEnv), and fake
outputs of repeated ops made without dispatching again (``FakeOutputs``)."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._prims_common import make_contiguous_strides_for
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.utils import _pytree as pytree


def program_shape_env(program: ExportedProgram) -> tuple[Any, ShapeEnv | None]:
    """The fake mode and ShapeEnv the program's values were traced in ((None, None) when no
    node carries a fake value)."""
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and getattr(value, "fake_mode", None) is not None:
            return value.fake_mode, value.fake_mode.shape_env
    return None, None


@contextlib.contextmanager
def tracing(fake_mode: Any) -> Iterator[None]:
    """The context a program's values are traced in, the same for the re-trace and for a
    rewrite's new nodes (so a value one records, the other may repeat): the program's fake
    mode; the Python dispatcher, which lets symbolic shapes through kernels that would
    otherwise read concrete sizes (``constant_pad_nd``'s C++ kernel guards ``Eq(s, example)``
    and fixes the dim); no autograd; and the backend switches as torch.export sets them while
    it traces (its ``_ignore_backend_decomps``: mkldnn, nnpack and cudnn off, restored on
    exit), since the fake convolution picks a backend and mkldnn's guards on the batch size
    would narrow a dynamic batch's range."""
    backends = (torch.backends.mkldnn, torch.backends.nnpack, torch.backends.cudnn)
    saved = [backend.set_flags(False) for backend in backends]
    try:
        with fake_mode, enable_python_dispatcher(), torch.no_grad():
            yield
    finally:
        for backend, flags in zip(backends, saved, strict=True):
            backend.set_flags(*flags)


_UNSTABLE_TAGS = frozenset({torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output,
                            torch.Tag.inplace_view})
_PLAIN = (int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def _stable(target: Any) -> bool:
    """An op whose outputs' metadata follows from its inputs' metadata alone: nothing is
    written and no size depends on the data."""
    return isinstance(target, torch._ops.OpOverload) and \
        not target._schema.is_mutable and not _UNSTABLE_TAGS.intersection(target.tags)


def _fresh_outputs(target: Any) -> bool:
    """The op returns new tensors: no output aliases an input."""
    return all(r.alias_info is None for r in target._schema.returns)


def _view_of_first(target: Any) -> bool:
    """The op returns one tensor, a view of its first argument (``view``, ``slice``,
    ``permute``, ``expand`` ...)."""
    schema = target._schema
    if len(schema.returns) != 1 or not schema.arguments:
        return False
    out, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return isinstance(schema.returns[0].type, torch.TensorType) and out is not None and \
        first is not None and not out.is_write and out.before_set == first.before_set


def _size_key(size: Any) -> Any:
    """A size as what it is at every size of the dims: an int, or a SymInt's expression."""
    return size if type(size) is int else size.node.expr


def _key_of(value: Any) -> Any:
    """What an output's metadata can depend on in one argument leaf (its sizes as
    expressions, so equal symbolic sizes key alike), or None when it is not known from
    metadata alone (a fake tensor carrying its data)."""
    if isinstance(value, torch.Tensor):
        if getattr(value, "constant", None) is not None:
            return None
        return (tuple(_size_key(d) for d in value.shape),
                tuple(_size_key(d) for d in value.stride()), value.dtype, value.device,
                _size_key(value.storage_offset()))
    if isinstance(value, torch.SymInt):
        return (torch.SymInt, value.node.expr)
    return (type(value), value) if isinstance(value, _PLAIN) else None


def _numel(sizes: Any) -> Any:
    return sympy.Mul(*(sympy.sympify(_size_key(d)) for d in sizes))


def _static(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and all(
        type(d) is int for d in (*value.shape, *value.stride(), value.storage_offset()))


_Meta = tuple[tuple[Any, ...], tuple[Any, ...], Any, torch.dtype, torch.device]


def _meta_of(value: torch.Tensor) -> _Meta:
    return (tuple(value.shape), tuple(value.stride()), value.storage_offset(), value.dtype,
            value.device)


class FakeOutputs:
    """Each op's fake outputs, computed once per distinct input metadata and made again for a
    repeat: fresh fake tensors of the same sizes, strides, dtype and device for an op whose
    outputs are new, the same view of the new input for a view. Sizes key as expressions of
    the dims, so a chunked transformer's layers, whose loops run the same ops on the same
    symbolic shapes, dispatch once (a fake dispatch with symbolic sizes costs 5-50 ms of
    sympy; a repeat, a tensor made with the recorded sizes, about 1 ms). Only for ops whose
    metadata follows from their inputs' (``_stable``) on data-free inputs; every other call is
    computed. ``shared`` gives one per fake mode, so the re-trace of a rewritten program
    repeats what the rewrite made."""

    def __init__(self, fake_mode: Any) -> None:
        self._mode = weakref.ref(fake_mode)
        self._seen: dict[Any, tuple[Any, list[_Meta]]] = {}

    @staticmethod
    def shared(fake_mode: Any) -> FakeOutputs:
        """The one ``FakeOutputs`` of ``fake_mode`` (made on first use, dropped with it)."""
        outputs = _SHARED.get(fake_mode)
        if outputs is None:
            outputs = _SHARED[fake_mode] = FakeOutputs(fake_mode)
        return outputs

    def __call__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 compute: Any) -> Any:
        """``compute()``'s value (``target`` on ``args`` and ``kwargs``), or a repeat's."""
        key = self._key(target, args, kwargs)
        if key is None:
            return compute()
        if key in self._seen:
            spec, outputs = self._seen[key]
            if _fresh_outputs(target):
                return pytree.tree_unflatten([self._fresh(*meta) for meta in outputs], spec)
            shape, stride, offset = outputs[0][:3]
            with self._mode():
                return args[0].as_strided(shape, stride, offset)
        value = self._contiguous_view(target, args, kwargs)
        value = compute() if value is None else value
        leaves, spec = pytree.tree_flatten(value)
        if all(isinstance(leaf, torch.Tensor) for leaf in leaves) and (
                all(leaf.storage_offset() == 0 for leaf in leaves) if _fresh_outputs(target)
                else leaves[0].dtype == args[0].dtype):  # a view as a strided view of its input
            self._seen[key] = (spec, [_meta_of(leaf) for leaf in leaves])
        return value

    def _key(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not _stable(target) or not (_fresh_outputs(target) or _view_of_first(target)):
            return None
        leaves, spec = pytree.tree_flatten((args, kwargs))
        keys = tuple(_key_of(leaf) for leaf in leaves)
        return None if None in keys else (target, spec, keys)

    def _contiguous_view(self, target: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> torch.Tensor | None:
        """``view(x, sizes)`` of a contiguous ``x`` with symbolic sizes, made as the
        contiguous strided view it is (the view kernel's general algorithm costs up to 0.2 s
        of sympy on a chunked loop's sizes), or None when that is not known: another op, a
        size to infer (-1), a strided input, element counts not equal as expressions."""
        if target is not torch.ops.aten.view.default or kwargs or len(args) != 2:
            return None
        base, sizes = args
        if _static(base) or any(type(d) is int and d < 0 for d in sizes):
            return None
        if [_size_key(d) for d in base.stride()] != [
                _size_key(d) for d in make_contiguous_strides_for(base.shape)]:
            return None
        if sympy.expand(_numel(base.shape) - _numel(sizes)) != 0:
            return None
        with self._mode():
            return base.as_strided(sizes, make_contiguous_strides_for(sizes),
                                   base.storage_offset())

    def _fresh(self, shape: tuple[Any, ...], stride: tuple[Any, ...], offset: Any,
               dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        mode = self._mode()
        if all(type(d) is int for d in (*shape, *stride)):
            with unset_fake_temporarily():
                meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
            return mode.fake_tensor_converter.from_meta_and_device(mode, meta, device)
        with mode:
            return torch.empty_strided(shape, stride, dtype=dtype, device=device)


_SHARED: weakref.WeakKeyDictionary[Any, FakeOutputs] = weakref.WeakKeyDictionary()
