"""Where a captured program's traced values live (their fake mode and ShapeEnv), and fake
outputs of repeated ops made without dispatching again (``FakeOutputs``)."""

from __future__ import annotations

from typing import Any

import torch
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


_UNSTABLE_TAGS = frozenset({torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output,
                            torch.Tag.inplace_view})
_PLAIN = (int, float, bool, complex, str, type(None), torch.dtype, torch.device, torch.layout,
          torch.memory_format)


def _fresh_outputs(target: Any) -> bool:
    """The op returns new tensors: no output aliases an input, nothing is written, and its
    sizes do not depend on the data."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    return (not schema.is_mutable and all(r.alias_info is None for r in schema.returns)
            and not _UNSTABLE_TAGS.intersection(target.tags))


def _key_of(value: Any) -> Any:
    """What a fresh output's metadata can depend on in one argument leaf, or None when it is
    not known from metadata alone (a symbolic size, a fake tensor carrying its data)."""
    if isinstance(value, torch.Tensor):
        if getattr(value, "constant", None) is not None or not all(
                type(d) is int for d in (*value.shape, *value.stride())):
            return None
        return (tuple(value.shape), value.stride(), value.dtype, value.device,
                value.storage_offset())
    return (type(value), value) if isinstance(value, _PLAIN) else None


class FakeOutputs:
    """Each op's fake outputs, computed once per distinct input metadata and made again as
    fresh fake tensors of the same sizes, strides, dtype and device for a repeat: a chunked
    transformer runs the same ops on the same shapes once per chunk, and a fake dispatch costs
    about ten times a fresh tensor. Only for ops whose outputs are new tensors
    (``_fresh_outputs``) on static, data-free inputs; every other call is computed."""

    def __init__(self, fake_mode: Any) -> None:
        self.fake_mode = fake_mode
        self._seen: dict[Any, tuple[Any, list[tuple[Any, ...]]]] = {}

    def __call__(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                 compute: Any) -> Any:
        """``compute()``'s value (``target`` on ``args`` and ``kwargs``), or a repeat's."""
        key = self._key(target, args, kwargs)
        if key is None:
            return compute()
        if key in self._seen:
            spec, outputs = self._seen[key]
            return pytree.tree_unflatten([self._fresh(*meta) for meta in outputs], spec)
        value = compute()
        leaves, spec = pytree.tree_flatten(value)
        metas = [_key_of(leaf) for leaf in leaves]
        if all(isinstance(leaf, torch.Tensor) and meta is not None and meta[4] == 0
               for leaf, meta in zip(leaves, metas, strict=True)):
            self._seen[key] = (spec, [meta[:4] for meta in metas])
        return value

    def _key(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not _fresh_outputs(target):
            return None
        leaves, spec = pytree.tree_flatten((args, kwargs))
        keys = tuple(_key_of(leaf) for leaf in leaves)
        return None if None in keys else (target, spec, keys)

    def _fresh(self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype,
               device: torch.device) -> torch.Tensor:
        with unset_fake_temporarily():
            meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return self.fake_mode.fake_tensor_converter.from_meta_and_device(
            self.fake_mode, meta, device)
