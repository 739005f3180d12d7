"""Stage 3 driver: folded constants and the memory-aware node order."""

from __future__ import annotations

import torch
from shared_models import Chain

import tensorplan as tp


class Causal(torch.nn.Module):
    """Attention scores with a causal mask made from constants alone."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q = torch.nn.Linear(16, 16)

    def forward(self, x):
        length = x.shape[1]
        mask = torch.full((length, length), float("-inf")).triu(1)
        return (self.q(x) @ x.transpose(1, 2) + mask).softmax(-1)


def kinds(prog: tp.Program) -> dict[str, str]:
    return {r.name: r.kind.value for r in prog.lowering()}


def test_a_causal_mask_is_folded_into_a_constant_out_of_the_arena_and_of_every_run():
    model, x = Causal(), torch.randn(1, 64, 16)
    prog = tp.compile(model, (x,))
    plain = tp.compile(model, (x,), fold=False)
    for p in (prog, plain):
        torch.testing.assert_close(p.run(x), model(x))
        p.plan.verify()
    mask = 64 * 64 * 4
    assert prog.plan.constant_bytes == prog.plan.baseline_constant_bytes + mask
    assert plain.plan.constant_bytes == plain.plan.baseline_constant_bytes
    assert prog.plan.arena_bytes + prog.plan.constant_bytes < \
        plain.plan.arena_bytes + plain.plan.constant_bytes
    rows = kinds(prog)
    assert rows["where"] == "folded" and prog.specs["where"].const
    assert {rows[n] for n in ("full", "arange", "ge", "scalar_tensor")} == {"folded away"}
    assert set(prog.folded.kept) == {"where"}
    assert prog.stats == {}


def test_folding_that_would_grow_constants_and_arena_is_not_done():
    model, x = Causal(), torch.randn(2, 32, 16)  # the mask is a quarter of the scores here
    prog = tp.compile(model, (x,))
    assert prog.folded.computed == frozenset()
    assert prog.plan.constant_bytes == prog.plan.baseline_constant_bytes
    torch.testing.assert_close(prog.run(x), model(x))


class TwoBranches(torch.nn.Module):
    """Two wide matmuls of one input, each summed: exported, both products are live at once."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(64, 1024))
        self.w2 = torch.nn.Parameter(torch.randn(64, 1024))

    def forward(self, x):
        a = x @ self.w1
        b = x @ self.w2
        return a.sum() + b.sum()


def test_the_memory_greedy_order_beats_the_exported_one():
    model, x = TwoBranches(), torch.randn(4, 64)
    prog = tp.compile(model, (x,))
    exported = tp.compile(model, (x,), reorder=False)
    torch.testing.assert_close(prog.run(x), model(x))
    torch.testing.assert_close(exported.run(x), model(x))
    product = 4 * 1024 * 4
    assert exported.plan.order == "exported"
    assert exported.plan.arena_bytes >= 2 * product
    assert prog.plan.order in ("memory-greedy", "depth-first")
    assert prog.plan.arena_bytes < 2 * product <= exported.plan.arena_bytes
    order = prog.order
    assert order.index("sum_1") < order.index("mm_1")  # a is summed before b is made


def test_the_exported_order_is_kept_when_no_order_is_better():
    prog = tp.compile(Chain(), (torch.randn(4),))
    assert prog.plan.order == "exported"
    assert prog.order == tuple(n.name for n in prog.exported_program.graph.nodes)
