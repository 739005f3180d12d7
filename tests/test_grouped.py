"""Grouped-query attention's repeated key and value heads read without the repeat
(``rewrite/grouped.py``): each product over a group of query heads, in both runtimes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import tensorplan as tp
from tensorplan.rewrite.grouped import grouped_products

aten = torch.ops.aten
pytestmark = pytest.mark.usefixtures("one_thread")

HEADS, KV_HEADS, DEPTH, CACHE = 8, 2, 16, 64


def _repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """transformers' ``repeat_kv``: each KV head repeated for its group of query heads."""
    batch, heads, rows, depth = x.shape
    return x[:, :, None].expand(batch, heads, group, rows, depth).reshape(
        batch, heads * group, rows, depth)


class _CachedAttention(nn.Module):
    """One grouped-query attention step over a static KV cache (a decode step's layer)."""

    def __init__(self) -> None:
        super().__init__()
        width = HEADS * DEPTH
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * KV_HEADS * DEPTH, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.register_buffer("keys", torch.zeros(1, KV_HEADS, CACHE, DEPTH))
        self.register_buffer("values", torch.zeros(1, KV_HEADS, CACHE, DEPTH))

    def forward(self, x: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        rows = x.shape[1]
        q = self.q(x).view(1, rows, HEADS, DEPTH).transpose(1, 2)
        k, v = self.kv(x).view(1, rows, 2, KV_HEADS, DEPTH).permute(2, 0, 3, 1, 4)
        self.keys.index_copy_(2, position, k)
        self.values.index_copy_(2, position, v)
        group = HEADS // KV_HEADS
        scores = q @ _repeat_kv(self.keys, group).transpose(2, 3) / DEPTH ** 0.5
        mixed = scores.softmax(-1) @ _repeat_kv(self.values, group)
        return self.out(mixed.transpose(1, 2).reshape(1, rows, HEADS * DEPTH))


def _inputs(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(1, rows, HEADS * DEPTH), torch.arange(3, 3 + rows)


def _clones(program: torch.export.ExportedProgram) -> int:
    return sum(n.target is aten.clone.default for n in program.graph.nodes)


def _eager(rows: int) -> tuple[_CachedAttention, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return _CachedAttention(), _inputs(rows)


def test_a_decode_step_reads_its_cache_without_repeating_the_heads() -> None:
    """The keys' and values' repeats (copies of 4 x a 8 KiB cache) are not made: the scores are
    one product per KV head over its 4 query heads. The arena is the two caches and 4 KiB,
    20,480 B, where ``reuse=False`` (the program as exported) takes 51,712 B; the step equals
    eager, the cache written alike."""
    model, (x, position) = _eager(1)
    exported = tp.capture(model, (x, position))
    grouped = grouped_products(exported)
    assert _clones(exported) == 2 and _clones(grouped) == 0
    assert sum(n.target is aten.bmm.default for n in grouped.graph.nodes) == 2
    prog = tp.compile(model, (x, position))
    unshared = tp.compile(model, (x, position), reuse=False)
    assert (prog.plan.arena_bytes, unshared.plan.arena_bytes) == (20480, 51712)
    reference, _ = _eager(1)
    with torch.no_grad():
        torch.testing.assert_close(prog.run(x, position), reference(x, position))
    torch.testing.assert_close(prog.state_dict()["keys"], reference.keys)
    assert grouped_products(grouped) is grouped  # nothing left: the program itself


def test_a_prefill_over_a_dynamic_length_copies_its_queries_and_equals_eager() -> None:
    """With several query rows the heads lie apart in the queries (``[1, T, h, D]``
    transposed): they are copied to ``[h, T, D]`` once for the keys' product. Over a dynamic
    length the group's ``4 T`` rows are sized from the input; each size equals eager."""
    model, args = _eager(8)
    length = torch.export.Dim("length", min=2, max=32)
    prog = tp.compile(model, args, dynamic_shapes=({1: length}, {0: length}))
    names = {n.name for n in prog.exported_program.graph.nodes}
    assert {"bmm_rows", "bmm_grouped", "bmm_1_grouped"} <= names and "bmm_1_rows" not in names
    for rows in (2, 13, 32):
        reference, (x, position) = _eager(rows)  # the cache as captured: a fresh runner's
        with torch.no_grad():
            torch.testing.assert_close(prog.runner().run(x, position), reference(x, position))


def test_the_pte_of_a_decode_step_reads_its_cache_without_the_repeat() -> None:
    """Shipped, the step makes no ``expand_copy`` of the cache: 27,136 B (82,432 B with the
    repeats), and it equals eager in ExecuTorch's runtime."""
    pytest.importorskip("executorch")
    from tensorplan.integrations.executorch import lower

    model, args = _eager(1)
    shipped = lower(tp.compile(model, args), check=True)
    plan = shipped.manager.executorch_program.execution_plan[0]
    names = {plan.operators[c.op_index].name for c in
             (i.instr_args for i in plan.chains[0].instructions) if hasattr(c, "op_index")}
    assert "aten::expand_copy" not in names
    assert shipped.check.matches
    assert shipped.arena_bytes == 27136


def _loop_bodies(program: torch.export.ExportedProgram) -> list[torch.fx.Graph]:
    return [m.graph for m in program.graph_module.modules()
            if isinstance(m, torch.fx.GraphModule) and m is not program.graph_module]


def test_a_chunked_prefill_passes_its_loop_the_kv_heads_unrepeated() -> None:
    """Chunked, the attention's loop reads the keys and values whole: it is passed the 2 KV
    heads, not their repeat for 8 query heads, and its body makes each product once per KV
    head over its group's rows of the chunk: 81,920 B, where with the repeats made the
    program plans 147,456 B and 4 chunks plan no smaller (the repeats are its peak). Equal to
    eager at every length."""
    model, args = _eager(32)
    length = torch.export.Dim("length", min=2, max=32)
    prog = tp.compile(model, args, dynamic_shapes=({1: length}, {0: length}), chunks=4)
    assert (prog.chunking.declined, prog.chunking.chosen.chunks) == ("", 4)
    top = prog.exported_program.graph
    assert not any(n.target is aten.expand.default for n in top.nodes)
    (body,) = _loop_bodies(prog.exported_program)
    made = {n.name for n in body.nodes}
    assert {"bmm_grouped", "bmm_1_grouped"} <= made
    passed = [n.meta["val"].shape for n in body.nodes
              if n.op == "placeholder" and isinstance(n.meta["val"], torch.Tensor)]
    assert torch.Size([KV_HEADS, DEPTH, CACHE]) in passed
    assert torch.Size([KV_HEADS, CACHE, DEPTH]) in passed
    assert prog.plan.arena_bytes == 81_920
    for rows in (2, 13, 32):
        reference, (x, position) = _eager(rows)
        with torch.no_grad():
            torch.testing.assert_close(prog.runner().run(x, position), reference(x, position))
