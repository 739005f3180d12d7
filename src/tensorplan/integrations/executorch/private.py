"""ExecuTorch 1.5.1's private names that tensorplan uses, each under a public name, in one place.

ExecuTorch does not promise these across versions; a new ExecuTorch that moves or changes one
breaks this module alone. Why each is needed:

- :data:`exir_ops` (``executorch.exir.dialects._ops.ops``): the edge dialect's operators,
  the only way to insert an edge op (``linear``, ``add``, ``view_copy``) into an edge graph
  (``rewrite.py``).
- :class:`ViewSpec` (``executorch.exir.passes.replace_view_copy_with_view_pass._ViewSpec``)
  and :func:`viewed_spec` (its ``_base``): the spec of a ``memory.view``, which shares its base's
  memory; a view's offset is its base's (``bodies.py``, ``planning_pass.py``).
- :func:`storage_root_chain` / :func:`debug_message_from_specs` (``Verifier``'s
  ``_storage_root_chain`` / ``_debug_message_from_specs``): the rules and the message of
  ExecuTorch's storage verifier, run over the pairs of specs whose bytes overlap
  (``reuse_check.py``).
- :func:`is_inplace_node` / :func:`alias_inplace_result_specs`
  (``executorch.exir.memory_planning``): which ops write one of their arguments, and the
  re-aliasing of their result's spec to it that ExecuTorch's spec collection does
  (``planning_pass.py``).
- :func:`check_default_mem_ids` / :func:`insert_mutable_buffer_specs`
  (``executorch.exir.passes.memory_planning_pass``): the steps of ExecuTorch's own pass that
  share mutable buffers across methods, run as ExecuTorch's pass runs them
  (``planning_pass.py``).
- :func:`update_output_node_and_specs` (``executorch.exir.passes.constant_prop_pass``): the
  last step of ExecuTorch's constant propagation, run after folding chosen values
  (``fold.py``).
- :func:`serialize_again` (``executorch.exir._serialize._serialize.serialize_for_executorch``
  and the manager's private fields): a lowered program changed after emission
  (``loops.py``) serialized as the manager serialized it.
- :func:`deserialize_pte` (``executorch.exir._serialize._program.deserialize_pte_binary``):
  the program a ``.pte``'s bytes hold, its constants restored, for running it with its plan
  where the runtime lacks its kernels (``emulate.py``).

``TensorplanPlanningPass`` also calls the ``_set_alloc_node_spec`` it inherits from
ExecuTorch's ``MemoryPlanningPass``, as ExecuTorch's own ``run`` does.

Importing this module imports ExecuTorch: a module that must load without it imports this
one inside its functions.
"""

from __future__ import annotations

from typing import Any

from executorch.exir import ExecutorchBackendConfig, ExecutorchProgramManager
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.exir._serialize._serialize import serialize_for_executorch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.memory_planning import Verifier
from executorch.exir.memory_planning import (
    _alias_inplace_result_specs as alias_inplace_result_specs,
)
from executorch.exir.memory_planning import _is_inplace_node as is_inplace_node
from executorch.exir.passes.constant_prop_pass import (
    _update_output_node_and_specs as update_output_node_and_specs,
)
from executorch.exir.passes.memory_planning_pass import (
    _check_default_mem_ids as check_default_mem_ids,
)
from executorch.exir.passes.memory_planning_pass import (
    _insert_mutable_buffer_specs as insert_mutable_buffer_specs,
)
from executorch.exir.passes.replace_view_copy_with_view_pass import _ViewSpec as ViewSpec
from executorch.exir.tensor import TensorSpec

__all__ = ["ViewSpec", "alias_inplace_result_specs", "check_default_mem_ids",
           "debug_message_from_specs", "deserialize_pte", "exir_ops",
           "insert_mutable_buffer_specs",
           "is_inplace_node", "serialize_again", "storage_root_chain",
           "update_output_node_and_specs", "viewed_spec"]

storage_root_chain = Verifier._storage_root_chain  # a spec and the storage bases it lies in
debug_message_from_specs = Verifier._debug_message_from_specs  # two overlapping specs, described


def viewed_spec(spec: Any) -> TensorSpec | None:
    """The spec whose memory the view spec ``spec`` (a :class:`ViewSpec`) shares, or None for
    any other spec."""
    return getattr(spec, "_base", None)


def serialize_again(manager: ExecutorchProgramManager, config: ExecutorchBackendConfig) -> None:
    """Serialize ``manager`` (an ``ExecutorchProgramManager`` lowered with ``config``) again
    from its emitted program, changed in place since ExecuTorch serialized it as the manager
    was made; its ``.buffer`` is then the changed program's."""
    manager._pte_data, manager._tensor_data = serialize_for_executorch(
        manager._emitter_output, config, manager._data_serializer, manager._named_data)
    manager._buffer = None


def deserialize_pte(data: bytes) -> Any:
    """The ``executorch.exir.schema.Program`` a ``.pte``'s bytes hold (its constant data
    restored into ``constant_buffer``)."""
    return deserialize_pte_binary(data).program
