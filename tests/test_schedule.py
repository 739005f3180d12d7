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


class ShapeMask(torch.nn.Module):
    """A causal mask made from the scores' *shape* (``ones_like`` reads no element of them)."""

    def forward(self, q, k):
        scores = q @ k.transpose(1, 2)
        keep = torch.ones_like(scores).tril().bool()
        return scores.masked_fill(~keep, 0.0).exp()


def test_a_mask_built_from_a_static_shape_is_folded():
    model, args = ShapeMask(), (torch.randn(2, 64, 16), torch.randn(2, 64, 16))
    prog = tp.compile(model, args)
    plain = tp.compile(model, args, fold=False)
    for p in (prog, plain):
        torch.testing.assert_close(p.run(*args), model(*args))
        p.plan.verify()
    rows = kinds(prog)
    assert rows["full_like"] == "folded away" and rows["bitwise_not"] == "folded"
    assert set(prog.folded.kept) == {"bitwise_not", "scalar_tensor_1"}
    # the 2x64x64 bool mask and the 0.0 scalar are constants; q, k and the scores are all the
    # arena holds, where run as exported the float ones_like and the bool mask sit beside
    # the scores
    scores, inputs = 2 * 64 * 64 * 4, 2 * 2 * 64 * 16 * 4
    assert prog.plan.constant_bytes == 2 * 64 * 64 + 4
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes == inputs + scores
    assert plain.plan.arena_bytes == 2 * scores + 2 * 64 * 64


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


class TwoBiases(torch.nn.Module):
    """Two layers that each compute the same position bias from constants (as T5 does)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(32, 4))

    def bias(self, length: int) -> torch.Tensor:
        position = torch.arange(length)
        buckets = (position[None, :] - position[:, None]).abs().clamp(max=31).to(torch.long)
        return self.table[buckets].permute(2, 0, 1).contiguous()

    def forward(self, x):
        length = x.shape[-1]
        return (x + self.bias(length)).softmax(-1) + self.bias(length)


def test_equal_folded_values_are_kept_once_and_checks_on_them_are_made_at_compile_time():
    model, x = TwoBiases(), torch.randn(4, 64, 64)
    prog = tp.compile(model, (x,))
    torch.testing.assert_close(prog.run(x), model(x))
    kept = prog.folded.kept
    assert len(kept) == 2 and len({id(t) for t in kept.values()}) == 1  # one tensor, kept once
    bias, table = 4 * 64 * 64 * 4, 32 * 4 * 4
    assert prog.plan.baseline_constant_bytes == table
    assert prog.plan.constant_bytes == bias  # the table is read at compile time only
    rows = kinds(prog)
    checks = [n for n in rows if n.startswith("_assert_tensor_metadata")]
    assert checks and {rows[n] for n in checks} == {"folded away"}


class PerLayerMask(torch.nn.Module):
    """Two layers, each making the float mask of one boolean causal mask (as OLMoE's
    decoder layers do): as a constant the float mask costs 4x its source."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pos", torch.arange(32))
        self.w = torch.nn.Parameter(torch.randn(32, 32))

    def forward(self, x):
        allowed = self.pos[None, :] <= self.pos[:, None]
        for _ in range(2):
            x = (x + torch.where(allowed, 0.0, float("-inf"))).softmax(-1) @ self.w
        return x


def test_a_float_mask_made_from_a_boolean_one_is_left_to_run_and_its_source_folded():
    model, x = PerLayerMask(), torch.randn(4, 32, 32)
    prog = tp.compile(model, (x,))
    torch.testing.assert_close(prog.run(x), model(x))
    assert prog.folded.unfolded == {"where", "where_1"}
    assert prog.folded.kept["le"].shape == (32, 32) and prog.folded.kept["le"].dtype == torch.bool
    assert kinds(prog)["where"] == "out"
    # folding all (the float mask kept, 4096 B) would cost arena 32768 + constants 8192;
    # folding nothing 33792 + 4352; the boolean mask folded alone 32768 + 5128
    assert (prog.plan.arena_bytes, prog.plan.constant_bytes) == (32768, 5128)
    unfolded = tp.compile(model, (x,), fold=False)
    assert (unfolded.plan.arena_bytes, unfolded.plan.constant_bytes) == (33792, 4352)


def test_what_was_left_unfolded_is_saved_with_the_program(tmp_path):
    model, x = PerLayerMask(), torch.randn(4, 32, 32)
    prog = tp.compile(model, (x,))
    prog.save(tmp_path / "mask.tplan")
    loaded = tp.load(tmp_path / "mask.tplan")
    assert loaded.folded.unfolded == {"where", "where_1"}
    assert loaded.folded.kept.keys() == prog.folded.kept.keys()
    torch.testing.assert_close(loaded.run(x), model(x))


class ConstantQueryNorm(torch.nn.Module):
    """DETR's decoder queries: a learned table through a layer norm, a multi-output op
    (``native_layer_norm``: output, mean, rstd) computed from constants alone."""

    def __init__(self, rows: int = 10, width: int = 8) -> None:
        super().__init__()
        self.query = torch.nn.Parameter(torch.randn(rows, width))
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(self.query)


def test_a_multi_output_op_of_constants_is_folded_with_its_items_and_they_are_kept():
    model, x = ConstantQueryNorm().eval(), torch.randn(10, 8)
    prog = tp.compile(model, (x,))
    assert {type(value) for value in prog.folded.kept.values()} == {torch.Tensor}
    assert set(prog.folded.kept) == {"getitem"}
    assert {"native_layer_norm", "getitem"} <= prog.folded.computed
    torch.testing.assert_close(prog.run(x), model(x), rtol=0, atol=0)


def test_an_item_of_a_tuple_left_to_run_leaves_the_tuple_to_run():
    from tensorplan.frontend.roles import read_roles
    from tensorplan.schedule.fold import fold_constants

    program = tp.capture(ConstantQueryNorm().eval(), (torch.randn(10, 8),))
    folded = fold_constants(program, tp.propagate(program), read_roles(program),
                            frozenset({"getitem"}))
    assert folded.unfolded == {"getitem", "native_layer_norm"}
    assert "native_layer_norm" not in folded.computed and folded.kept == {}
