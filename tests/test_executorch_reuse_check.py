"""``reuse_check.verify_storage_reuse`` passes and fails exactly where ExecuTorch's own
``Verifier.verify_storage_reuse`` does, visiting only the specs whose bytes overlap."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("executorch")

from executorch.exir.error import InternalError  # noqa: E402
from executorch.exir.memory_planning import Verifier  # noqa: E402

from tensorplan import zoo  # noqa: E402
from tensorplan.integrations.executorch import lower  # noqa: E402
from tensorplan.integrations.executorch.reuse_check import (  # noqa: E402
    _overlapping_pairs,
    verify_storage_reuse,
)


@pytest.fixture(scope="module")
def planned():
    example = zoo.example("tiny_gpt")
    exported = torch.export.export(example.model, example.args,
                                   dynamic_shapes=example.dynamic_shapes)
    program = lower(exported).manager.exported_program()
    return Verifier(program.graph_module, False, True, True, program.graph_signature)


def _specs(verifier: Verifier) -> list:
    return [node.meta["spec"] for node in verifier.graph_module.graph.nodes
            if getattr(node.meta.get("spec"), "mem_offset", None) is not None
            and not getattr(node.meta["spec"], "const", False)]


def test_a_plan_executorch_accepts_passes(planned):
    assert planned.verify_storage_reuse() > 0  # ExecuTorch's own: it reuses storage
    verify_storage_reuse(planned)


def test_the_overlapping_pairs_are_the_pairs_executorch_finds_overlapping(planned):
    specs = _specs(planned)
    ours = {frozenset((id(a), id(b))) for a, b in _overlapping_pairs(specs)}
    theirs = {frozenset((id(a), id(b))) for i, a in enumerate(specs) for b in specs[i + 1:]
              if Verifier.storage_overlap(a, b)}
    assert ours == theirs and len(ours) > 100


def test_two_live_specs_made_to_overlap_fail_both_verifiers(planned):
    specs = sorted(_specs(planned), key=lambda s: s.lifetime[0])
    first, second = next((a, b) for a in specs for b in specs
                         if a is not b and a.mem_id == b.mem_id and a.allocated_memory
                         and b.allocated_memory and a.storage_base is None
                         and b.storage_base is None
                         and Verifier.lifetime_overlap(a, b)
                         and not Verifier.storage_overlap(a, b))
    saved = second.mem_offset
    second.mem_offset = first.mem_offset
    try:
        with pytest.raises(InternalError, match="Unexpected storage overlap"):
            planned.verify_storage_reuse()
        with pytest.raises(InternalError, match="Unexpected storage overlap"):
            verify_storage_reuse(planned)
    finally:
        second.mem_offset = saved
