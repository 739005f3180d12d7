"""A product whose output columns are read apart (GPT-2's fused queries, keys and values) made
as one product per part (``rewrite/columns.py``), so a chunk makes its queries by rows."""

from __future__ import annotations

import pytest
import torch

import tensorplan as tp
from tensorplan.rewrite.chunks import multiply_adds
from tensorplan.rewrite.columns import split_products

pytest.importorskip("transformers")
from tensorplan.zoo import hf  # noqa: E402

aten = torch.ops.aten
pytestmark = pytest.mark.usefixtures("one_thread")


def _products(program: torch.export.ExportedProgram) -> list[str]:
    return [n.name for n in program.graph.nodes if n.target is aten.addmm.default]


def test_gpt2s_fused_projection_is_made_in_three_parts_equal_to_the_whole() -> None:
    """Each layer's ``c_attn`` (one ``addmm`` of 3 x 128 columns, split in three) becomes
    three products over views of the weight's and the bias's columns: two layers, four more
    products, the same multiply-adds, and the outputs bitwise those of the program."""
    torch.manual_seed(0)
    program = tp.capture(hf._gpt2_model(), (hf._tokens(32),))
    parted = split_products(program)
    before, after = _products(program), _products(parted)
    assert len(after) == len(before) + 4
    assert {"addmm_part0", "addmm_part1", "addmm_part2"} <= set(after)
    assert multiply_adds(parted) == multiply_adds(program)
    tokens = hf._tokens(32)
    with torch.no_grad():
        assert torch.equal(parted.module()(tokens), program.module()(tokens))
    assert split_products(parted) is parted  # nothing left to split: the program itself


def test_a_chunk_makes_its_queries_by_rows_and_the_keys_and_values_whole() -> None:
    """Chunked, the queries' product is in its layer's region (made per chunk) and the keys'
    and values' are not; the program runs equal to eager at every size of its range."""
    torch.manual_seed(0)
    model = hf._gpt2_model()
    prog = tp.compile(model, (hf._tokens(32),), dynamic_shapes=({1: hf._seq_dim()},),
                      chunks="auto")
    inside = {name for region in prog.chunking.regions for name in region.nodes}
    assert {"addmm_part0", "addmm_4_part0"} <= inside
    assert not inside & {"addmm_part1", "addmm_part2", "addmm_4_part1", "addmm_4_part2"}
    for seq in (2, 37, 64):
        tokens = hf._tokens(seq)
        with torch.no_grad():
            torch.testing.assert_close(prog.run(tokens), model(tokens))
