"""The token dim chunk by chunk (``rewrite/chunks.py``, ``rewrite/rows.py``; issue 31).

Exactness is checked two ways: the chunked program's outputs equal the unchunked program's
bitwise on one thread (each chunk here has 16 rows: MKL's matmul of a few rows, 4 and below,
sums in another order, so a chunk that small is only equal within rounding), and both equal
eager within 1e-5 (the exported attention is decomposed, eager's is fused).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensorplan as tp
from tensorplan.analysis.liveness import scheduled_nodes
from tensorplan.errors import InputError
from tensorplan.report.rewrites import rewrite_notes
from tensorplan.rewrite import chunks
from tensorplan.rewrite.chunk_emit import chunk_program, loop_of
from tensorplan.rewrite.chunk_regions import regions
from tensorplan.rewrite.rows import WHOLE, Rows, input_rows, reshaped_rows

S, D, H = 64, 32, 4  # tokens, width, heads


pytestmark = pytest.mark.usefixtures("one_thread")


def _rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding over the last dim (the tables sliced like the rows)."""
    half = x.shape[-1] // 2
    freq = 1.0 / (10000 ** (torch.arange(half) / half))
    angles = torch.arange(x.shape[-2])[:, None] * freq[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Layer(nn.Module):
    """One pre-norm transformer layer; the options cover the attention variants of issue 31:
    causal or padded, grouped-query, rotary, a learned relative bias, cross-attention, and a
    mixture of experts routed per token."""

    def __init__(self, causal: bool = True, kv_heads: int = H, rotary: bool = False,
                 bias: bool = False, cross: bool = False, experts: int = 0) -> None:
        super().__init__()
        self.causal, self.kv_heads, self.rotary, self.cross = causal, kv_heads, rotary, cross
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D // H * kv_heads)
        self.out = nn.Linear(D, D)
        self.bias = nn.Parameter(torch.randn(H, S, S)) if bias else None
        self.router = nn.Linear(D, experts) if experts else None
        count = max(experts, 1)
        self.up = nn.ModuleList(nn.Linear(D, 4 * D) for _ in range(count))
        self.down = nn.ModuleList(nn.Linear(4 * D, D) for _ in range(count))

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(1, x.shape[1], heads, D // H).transpose(1, 2)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.router is None:
            return self.down[0](F.gelu(self.up[0](x)))
        gates = self.router(x).softmax(-1)
        top, index = gates.topk(2, dim=-1)
        weights = torch.zeros_like(gates).scatter(-1, index, top)
        pairs = zip(self.up, self.down, strict=True)
        outs = torch.stack([down(F.gelu(up(x))) for up, down in pairs], -1)
        return (outs * weights.unsqueeze(-2)).sum(-1)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None,
                pad: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norm1(x)
        q = self._heads(self.q(h), H)
        k, v = self.kv(memory if self.cross else h).chunk(2, -1)
        k, v = self._heads(k, self.kv_heads), self._heads(v, self.kv_heads)
        if self.rotary:
            q, k = _rotary(q), _rotary(k)
        if self.kv_heads != H:
            k = k.repeat_interleave(H // self.kv_heads, 1)
            v = v.repeat_interleave(H // self.kv_heads, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)
        if self.bias is not None:
            scores = scores + self.bias
        rows = x.shape[1]
        if self.causal:
            scores = scores.masked_fill(torch.ones(rows, rows, dtype=torch.bool).triu(1), -1e9)
        if pad is not None:
            scores = scores + (1.0 - pad[:, None, None, :]) * -1e9
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, rows, D)
        x = x + self.out(a)
        return x + self._mlp(self.norm2(x))


class Stack(nn.Module):
    """Two layers and a head over a token embedding."""

    def __init__(self, **options) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, D)
        self.layers = nn.ModuleList(Layer(**options) for _ in range(2))
        self.head = nn.Linear(D, 8)

    def forward(self, tokens: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, *rest)
        return self.head(x)


def _tokens() -> torch.Tensor:
    return torch.randint(0, 50, (1, S))


def _both(model: nn.Module, args: tuple, count: int = 4):
    """The program compiled as exported and with ``count`` chunks."""
    program = tp.capture(model.eval(), args)
    return tp.compile(program), tp.compile(program, chunks=count)


def _check_exact(model: nn.Module, args: tuple, count: int = 4) -> tp.Program:
    plain, chunked = _both(model, args, count)
    assert chunked.chunking.chosen.chunks == count, chunked.chunking.declined
    assert chunked.plan.arena_bytes < plain.plan.arena_bytes
    with torch.no_grad():
        eager = model(*args)
    got = chunked.run(*args)
    assert torch.equal(got, plain.run(*args))
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)
    return chunked


@pytest.mark.parametrize("options", [
    {"causal": True}, {"causal": False}, {"kv_heads": 2}, {"rotary": True},
    {"bias": True}, {"experts": 4},
], ids=["causal", "bidirectional", "grouped-query", "rotary", "relative-bias", "experts"])
def test_chunked_layers_equal_the_unchunked_program_and_eager(options) -> None:
    torch.manual_seed(0)
    prog = _check_exact(Stack(**options), (_tokens(),))
    assert len(prog.chunking.regions) >= 2  # one per layer at least
    assert prog.chunking.chosen.overhead == 1.0  # chunking adds no multiply-adds


def test_a_padding_mask_and_cross_attention_are_sliced_by_rows() -> None:
    torch.manual_seed(0)
    pad = torch.ones(1, S)
    pad[:, 50:] = 0
    model = Stack(causal=False, cross=True)
    _check_exact(model, (_tokens(), torch.randn(1, S, D), pad))


def test_the_scores_are_made_one_chunk_at_a_time() -> None:
    """A layer's region holds its scores (heads x S x S), made per chunk: the planned arena
    drops by more than three quarters of one layer's scores at 4 chunks."""
    torch.manual_seed(0)
    plain, chunked = _both(Stack(), (_tokens(),), 4)
    region = max(chunked.chunking.regions, key=lambda r: r.largest_bytes)
    assert region.largest_bytes >= H * S * S * 4
    scores = H * S * S * 4
    assert plain.plan.arena_bytes - chunked.plan.arena_bytes >= 0.75 * scores - 4096


class Cache(nn.Module):
    """Attention over a key/value cache written at the positions given (a mutable buffer)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = Layer(causal=False)
        self.register_buffer("keys", torch.zeros(1, S, D))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.keys.index_copy_(1, positions, self.layer.norm1(x))
        return self.layer(x, None) + self.keys.sum()


def test_a_kv_cache_write_stays_whole_and_the_buffer_is_written() -> None:
    torch.manual_seed(0)
    model = Cache().eval()
    x, positions = torch.randn(1, S, D), torch.arange(S)
    program = tp.capture(model, (x, positions))
    chunked = tp.compile(program, chunks=4)
    assert chunked.chunking.chosen.chunks == 4
    plain = tp.compile(program)
    for _ in range(2):
        assert torch.equal(chunked.run(x, positions), plain.run(x, positions))
    assert torch.equal(chunked.state_dict()["keys"], plain.state_dict()["keys"])
    with torch.no_grad():
        torch.testing.assert_close(chunked.run(x, positions), model(x, positions))


def test_a_saved_chunked_program_loads_and_runs_alike(tmp_path) -> None:
    """The loaded program's fake values carry no view offsets: in-place reuse once took a
    chunk's slice of the embedding for the storage's start and the loaded plan differed."""
    torch.manual_seed(0)
    tokens = _tokens()
    prog = tp.compile(Stack().eval(), (tokens,), chunks=4)
    prog.save(tmp_path / "chunked.tplan")
    loaded = tp.load(tmp_path / "chunked.tplan")
    assert loaded.plan.arena_bytes == prog.plan.arena_bytes
    assert torch.equal(loaded.run(tokens), prog.run(tokens))


def test_a_loaded_chunked_pt2_plans_right(tmp_path) -> None:
    torch.manual_seed(0)
    model, tokens = Stack().eval(), _tokens()
    program = tp.capture(model, (tokens,))
    found, _ = regions(program)
    torch.export.save(chunk_program(program, found, [4] * len(found)),
                      tmp_path / "chunked.pt2")
    prog = tp.compile(str(tmp_path / "chunked.pt2"))
    with torch.no_grad():
        torch.testing.assert_close(prog.run(tokens), model(tokens), rtol=1e-5, atol=1e-5)


def test_auto_keeps_the_count_its_estimate_ranks_first_and_lists_the_rest() -> None:
    torch.manual_seed(0)
    tokens = _tokens()
    prog = tp.compile(Stack().eval(), (tokens,), chunks="auto")
    tried = prog.chunking.candidates
    assert [c.chunks for c in tried] == [1, *chunks.AUTO_COUNTS]
    planned = [c for c in tried if c.arena_bytes is not None]
    assert len(planned) == 2  # the program as exported and the count chosen
    least = min(c.estimate_bytes for c in tried[1:])
    assert prog.chunking.chosen.estimate_bytes <= least * chunks.AUTO_SLACK
    assert prog.plan.arena_bytes <= prog.chunking.chosen.arena_bytes  # greedy, then the best
    estimates = [c.estimate_bytes for c in tried]
    capped = chunks.AUTO_COUNTS.index(S // chunks.MIN_CHUNK_ROWS) + 1  # 8 chunks of 8 rows
    assert estimates[:capped + 1] == sorted(set(estimates[:capped + 1]), reverse=True)
    assert set(estimates[capped:]) == {estimates[capped]}  # more chunks would be under 8 rows


def test_auto_leaves_at_least_eight_rows_a_chunk_where_a_count_asks_for_fewer() -> None:
    """(An ``nn.Sequential``'s input is called ``input``: the rebuilt graph keeps the name.)"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, D), nn.Linear(D, 4 * D), nn.GELU(),
                          nn.Linear(4 * D, D)).eval()
    tokens = torch.randint(0, 50, (1, 12))
    auto = tp.compile(model, (tokens,), chunks="auto")
    assert auto.chunking.chosen.chunks == 1
    assert auto.chunking.declined == "no region has 16 rows (two chunks of 8)"
    two = tp.compile(model, (tokens,), chunks=2)
    assert two.chunking.chosen.chunks == 2
    with torch.no_grad():
        assert torch.equal(two.run(tokens), model(tokens))


def test_the_page_and_the_picture_say_the_program_is_chunked_and_where(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from tensorplan.report.html import page_data, value_details
    from tensorplan.report.subject import model_subject
    from tensorplan.report.timeline import _title, plot_timeline
    torch.manual_seed(0)
    plain, chunked = _both(Stack(), (_tokens(),), 4)
    notes = rewrite_notes(chunked)
    assert [n.label for n in notes] == ["chunked"]
    assert notes[0].summary == f"chunked: {len(chunked.chunking.regions)} regions in 4 chunks " \
                               f"of rows"
    subject = model_subject(chunked, "m", value_details(chunked))
    rows = dict(page_data(chunked.plan, subject)["summary"])
    for region in chunked.chunking.regions:
        assert f"{region.split} ({S} rows of dim {region.dim} in 4 chunks," in rows["chunked"]
    assert rewrite_notes(plain) == []  # chunks not asked for: no note
    assert _title(chunked.plan, subject).splitlines()[1] == notes[0].summary
    declined = tp.compile(nn.Sequential(nn.Conv2d(3, 4, 3)).eval(), (torch.randn(1, 3, 8, 8),),
                          chunks="auto")
    assert rewrite_notes(declined)[0].summary == "not chunked"
    plot_timeline(chunked, tmp_path / "t.svg")
    assert notes[0].summary in (tmp_path / "t.svg").read_text()
    assert "chunked: where its 2 regions run" in (tmp_path / "t.svg").read_text()
    steps = [n.name for n in scheduled_nodes(chunked.exported_program.graph,
                                             chunked.schedule.order)]
    spans = dict(zip((r.split for r in chunked.chunking.regions), notes[0].spans, strict=True))
    runs = [name not in chunked.schedule.folded.computed for name in steps]
    for region in chunked.chunking.regions:  # from the first node of its loop to the split
        start, end = spans[region.split]
        assert steps[end - 1] == region.split and loop_of(steps[start]) == region.split
        assert not any(loop_of(name) == region.split and run
                       for name, run in zip(steps[:start], runs, strict=False))
    assert page_data(chunked.plan, subject)["marks"][0]["spans"] == \
        [list(span) for span in notes[0].spans]


class Stem(nn.Module):
    """A convolution stem at 64 x 64 (its peak larger than the layers') down to S tokens, then
    two layers: patches lower the stem, and only then are the layers the peak to chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, 2, 1), nn.ReLU(),
                                  nn.Conv2d(16, D, 3, 2, 1))
        self.layers = nn.ModuleList(Layer(causal=False) for _ in range(2))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stem(image).flatten(2).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        return x


def test_chunks_compose_with_patches_of_a_conv_stem() -> None:
    torch.manual_seed(0)
    model, image = Stem().eval(), torch.randn(1, 3, 64, 64)
    plain = tp.compile(model, (image,), chunks=4)
    assert plain.chunking.chosen.chunks == 1  # the stem is the peak: chunks alone gain nothing
    patched = tp.compile(model, (image,), patches="auto")
    both = tp.compile(model, (image,), patches="auto", chunks=4)
    assert both.patching.chosen.split and both.chunking.chosen.chunks == 4
    assert both.plan.arena_bytes < patched.plan.arena_bytes < plain.plan.arena_bytes
    with torch.no_grad():
        torch.testing.assert_close(both.run(image), model(image), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [
    {"banks": [tp.Bank("sram", 48 * 1024, 1.0), tp.Bank("dram", None, 40.0)]},
    {"fold": False}, {"reuse": False}, {"algorithm": "optimal"},
], ids=["banks", "no-folding", "no-reuse", "optimal"])
def test_chunks_compose_with_banks_folding_reuse_and_the_planners(options) -> None:
    torch.manual_seed(0)
    model, tokens = Stack().eval(), _tokens()
    plain = tp.compile(model, (tokens,), **options)
    chunked = tp.compile(model, (tokens,), chunks=4, **options)
    assert chunked.chunking.chosen.chunks == 4
    assert chunked.plan.arena_bytes < plain.plan.arena_bytes
    for bank in chunked.plan.banks:
        assert bank.capacity is None or bank.arena_bytes <= bank.capacity
    assert torch.equal(chunked.run(tokens), plain.run(tokens))


def _loop_nodes(program: torch.export.ExportedProgram) -> tuple[int, int]:
    """The loops (``scan``) of a program and its nodes, every loop body's included."""
    module = program.graph_module
    loops = sum(n.target is torch.ops.higher_order.scan for n in module.graph.nodes)
    nodes = sum(len(m.graph.nodes) for m in module.modules() if isinstance(m, torch.fx.GraphModule))
    return loops, nodes


def test_a_plain_dynamic_seq_chunks_as_a_loop_equal_to_eager_at_every_size() -> None:
    """A plain ``Dim`` (2..128): chunks of 32 rows run as a loop, as many as the rows need,
    the last one padded; the body is planned once, so the program is no larger."""
    torch.manual_seed(0)
    model = Stack(rotary=True, kv_heads=2).eval()
    seq = torch.export.Dim("seq", min=2, max=2 * S)
    program = tp.capture(model, (_tokens(),), dynamic_shapes=({1: seq},))
    plain, chunked = tp.compile(program), tp.compile(program, chunks=4)
    assert (chunked.chunking.declined, chunked.chunking.chosen.chunks) == ("", 4)
    assert chunked.chunking.chosen.overhead == 1.0  # no multiply-add added at the bound
    loops, nodes = _loop_nodes(chunked.exported_program)
    assert loops == 2 and nodes <= 1.5 * _loop_nodes(plain.exported_program)[1]
    assert chunked.plan.arena_bytes < 0.5 * plain.plan.arena_bytes
    for rows in (2, 5, 31, 32, 33, 97, 2 * S):  # smallest, odd, around a chunk, largest
        tokens = torch.randint(0, 50, (1, rows))
        with torch.no_grad():
            eager = model(tokens)
        got = chunked.run(tokens)
        torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)
        if rows >= 8:  # as many rows a matmul as whole: the same kernels, bitwise
            assert torch.equal(got, plain.run(tokens))


def test_auto_runs_a_layers_mlp_whole_where_its_values_raise_no_peak() -> None:
    """Each layer is cut at its residual stream between the attention and the MLP, and each
    part runs in the fewest chunks that leave the estimated peak no higher: at 256 tokens a
    chunk of 8 rows holds 32 KiB of scores (4 heads x 256 keys a row), 32 chunks; the MLP's
    256 x 128 floats whole stay below the peak of the attention's loop, so the MLP runs whole
    (one loop a layer, its products on all the rows), and the arena, 235,552 B (the loop reads
    the 2 key and value heads unrepeated, ``grouped.py``), is below one count of 32 for both."""
    torch.manual_seed(0)
    model = Stack(rotary=True, kv_heads=2).eval()
    seq = torch.export.Dim("seq", min=2, max=4 * S)
    program = tp.capture(model, (torch.randint(0, 50, (1, 4 * S)),),
                         dynamic_shapes=({1: seq},))
    auto = tp.compile(program, chunks="auto")
    regions, counts = auto.chunking.regions, auto.chunking.chosen.per_region
    assert [(r.largest_bytes, n) for r, n in zip(regions, counts, strict=True)] == \
        [(H * 4 * S * 4 * S * 4, 32)] * 2
    assert _loop_nodes(auto.exported_program)[0] == 2
    assert auto.plan.arena_bytes == 235_552
    assert auto.plan.arena_bytes < tp.compile(program, chunks=32).plan.arena_bytes
    for rows in (2, 9, 100, 4 * S):
        tokens = torch.randint(0, 50, (1, rows))
        with torch.no_grad():
            eager = model(tokens)
        torch.testing.assert_close(auto.run(tokens), eager, rtol=1e-5, atol=1e-5)


def _dynamic_stack() -> tuple[nn.Module, tuple[torch.Tensor], tuple[dict[int, Any]]]:
    """A causal stack with rotary and grouped-query attention whose seq is 8 x blocks, 16..128."""
    torch.manual_seed(0)
    blocks = torch.export.Dim("blocks", min=2, max=16)
    return Stack(rotary=True, kv_heads=2).eval(), (_tokens(),), ({1: 8 * blocks},)


def test_a_dynamic_seq_that_is_a_multiple_is_chunked_and_proven_at_every_size() -> None:
    model, args, dynamic = _dynamic_stack()
    program = tp.capture(model, args, dynamic_shapes=dynamic)
    plain, chunked = tp.compile(program), tp.compile(program, chunks=16)  # chunks of 8 rows
    assert chunked.chunking.chosen.chunks == 16, chunked.chunking.declined
    assert all(str(region.symbolic) == f"8*{plain.plan.symbolic.dims[0].symbol}"
               for region in chunked.chunking.regions)
    symbolic = chunked.plan.symbolic
    assert symbolic is not None  # blocks chunks of 8 rows: no padding; held at the bound only
    assert set(dict(symbolic.held).values()) == {  # the body's scores, 8 rows x all the keys
        f"it lives in subgraph '{region.split}_loop_body/', planned at its bounds"
        for region in chunked.chunking.regions}
    name = symbolic.dims[0].name
    sizes = {b: (symbolic.arena.evaluate({name: b}), plain.plan.symbolic.arena.evaluate({name: b}))
             for b in (2, 5, 8, 16)}
    assert sizes[2] == (40_064, 13_312)  # the body's scores at 128 keys: above 16 tokens whole
    assert all(chunked < whole for chunked, whole in (sizes[5], sizes[8], sizes[16]))
    for blocks in (2, 5, 16):
        tokens = torch.randint(0, 50, (1, 8 * blocks))
        with torch.no_grad():
            eager = model(tokens)
        torch.testing.assert_close(chunked.run(tokens), eager, rtol=1e-5, atol=1e-5)
    assert chunked.plan.arena_bytes == symbolic.arena.evaluate({name: 16})
    chunked_note = next(n for n in rewrite_notes(chunked) if n.label == "chunked")
    assert f"8*{symbolic.dims[0].symbol}, at most 128, rows of dim 1" in chunked_note.detail


def test_a_count_that_does_not_divide_a_multiple_pads_its_rows() -> None:
    model, args, dynamic = _dynamic_stack()
    program = tp.capture(model, args, dynamic_shapes=dynamic)
    prog = tp.compile(program, chunks=4)  # chunks of 32 rows over 8 x blocks: padded
    assert prog.chunking.chosen.chunks == 4
    assert _loop_nodes(prog.exported_program)[0] == len(prog.chunking.regions)
    held = dict(prog.plan.symbolic.held)
    assert any("_padded" in reason and "is not a polynomial in the dims" in reason
               for reason in held.values())  # the padded rows are listed, held at the bound
    for blocks in (2, 5, 16):
        tokens = torch.randint(0, 50, (1, 8 * blocks))
        with torch.no_grad():
            torch.testing.assert_close(prog.run(tokens), model(tokens), rtol=1e-5, atol=1e-5)
    found, _ = regions(program)
    three = chunk_program(program, found, [3] * len(found))  # 43 rows a chunk
    assert _loop_nodes(three)[0] == len(found)


def test_a_program_with_no_region_declines_with_its_reason() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    prog = tp.compile(model, (torch.randn(1, 3, 8, 8),), chunks="auto")
    assert prog.chunking.chosen.chunks == 1
    assert prog.chunking.declined.startswith("no region")


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "4", (2, 2)])
def test_chunks_that_are_not_auto_or_a_positive_int_are_an_input_error(bad) -> None:
    with pytest.raises(InputError, match="expected None, \"auto\" or a positive number"):
        tp.compile(nn.Linear(4, 4), (torch.randn(2, 4),), chunks=bad)


def test_more_chunks_than_rows_is_an_input_error() -> None:
    program = tp.capture(Stack().eval(), (_tokens(),))
    found, _ = regions(program)
    with pytest.raises(InputError, match=f"do not fit the {S} rows"):
        chunk_program(program, found, [S + 1] * len(found))


def test_the_keys_are_left_whole_with_the_reader_that_needs_them_whole() -> None:
    program = tp.capture(Stack(causal=False).eval(), (_tokens(),))
    _, whole = regions(program)
    assert any("read whole by" in w.reason for w in whole)


# Row rules, one op each, on a graph of the op alone.

def _node(fn, *args, target=None):
    class Op(nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    program = tp.capture(Op(), args)
    calls = [n for n in program.graph.nodes if n.op == "call_function"]
    return next(n for n in calls if target is None or n.target is target)


aten = torch.ops.aten


def test_a_pointwise_op_slices_inputs_alike_and_reads_a_broadcast_one_whole() -> None:
    node = _node(torch.add, torch.randn(1, 8, 4), torch.randn(4))
    x, bias = (a.name for a in node.args)
    assert input_rows(node, Rows(1)) == {x: Rows(1), bias: WHOLE}
    assert input_rows(node, Rows(2)) == {x: Rows(2), bias: Rows(0)}


def test_a_matmul_reads_its_rows_from_one_side_and_the_other_whole() -> None:
    node = _node(torch.bmm, torch.randn(2, 8, 4), torch.randn(2, 4, 8))
    a, b = (arg.name for arg in node.args)
    assert input_rows(node, Rows(1)) == {a: Rows(1), b: WHOLE}
    assert input_rows(node, Rows(2)) == {a: WHOLE, b: Rows(2)}
    assert input_rows(node, Rows(0)) == {a: Rows(0), b: Rows(0)}


def test_a_softmax_or_reduction_over_the_dim_is_refused() -> None:
    softmax = _node(lambda x: x.softmax(-1), torch.randn(8, 8))
    assert input_rows(softmax, Rows(0)) == {softmax.args[0].name: Rows(0)}
    assert input_rows(softmax, Rows(1)) is None
    total = _node(lambda x: x.sum(0), torch.randn(8, 4))
    assert input_rows(total, Rows(0)) == {total.args[0].name: Rows(1)}  # the input's dim 1
    assert input_rows(_node(lambda x: x.sum(0, keepdim=True), torch.randn(8, 4)),
                      Rows(0)) is None


def test_a_cat_along_the_dim_is_refused_and_along_another_kept() -> None:
    node = _node(lambda a, b: torch.cat([a, b], 1), torch.randn(8, 2), torch.randn(8, 3))
    a, b = (n.name for n in node.args[0])
    assert input_rows(node, Rows(0)) == {a: Rows(0), b: Rows(0)}
    assert input_rows(node, Rows(1)) is None


def test_a_layer_norm_keeps_the_rows_apart_but_not_its_normalized_dims() -> None:
    node = _node(lambda x: F.layer_norm(x, (4,)), torch.randn(8, 4),
                 target=aten.native_layer_norm.default)
    assert input_rows(node, Rows(0)) == {node.args[0].name: Rows(0)}
    assert input_rows(node, Rows(1)) is None


def test_a_reshape_maps_the_rows_and_refuses_tokens_merged_with_a_batch() -> None:
    assert reshaped_rows((1, 8, 4), (8, 4), Rows(0)) == Rows(1)
    assert reshaped_rows((32,), (8, 4), Rows(0)) == Rows(0, scale=4)
    assert reshaped_rows((8, 4), (1, 8, 2, 2), Rows(1)) == Rows(0)
    assert reshaped_rows((2, 8, 4), (16, 4), Rows(0)) is None


def test_a_slice_along_the_dim_offsets_the_rows() -> None:
    node = _node(lambda t: t[2:10], torch.randn(16, 4), target=aten.slice.Tensor)
    assert input_rows(node, Rows(0)) == {node.args[0].name: Rows(0, offset=2)}
    assert Rows(0, offset=2).span((4, 8)) == (6, 10)


def test_an_embedding_takes_the_rows_of_its_indices() -> None:
    node = _node(lambda w, i: F.embedding(i, w), torch.randn(10, 4),
                 torch.randint(0, 10, (1, 8)))
    weight, indices = node.args[0].name, node.args[1].name
    assert input_rows(node, Rows(1)) == {weight: WHOLE, indices: Rows(1)}
    assert input_rows(node, Rows(2)) is None


def test_the_estimate_falls_with_the_chunk_count() -> None:
    program = tp.capture(Stack().eval(), (_tokens(),))
    found, _ = regions(program)
    estimates = [chunks.estimate(program, found, [n] * len(found)) for n in (1, 2, 4, 8)]
    assert estimates == sorted(estimates, reverse=True) and estimates[0] > estimates[-1]
    assert chunks.multiply_adds(program) == chunks.multiply_adds(
        chunk_program(program, found, [4] * len(found)))


def test_a_chunked_pte_equals_eager_in_executorchs_runtime() -> None:
    pytest.importorskip("executorch")
    from executorch.runtime import Runtime

    from tensorplan.integrations.executorch import to_executorch

    torch.manual_seed(0)
    model, tokens = Stack().eval(), _tokens()
    prog = tp.compile(model, (tokens,), chunks=4)
    manager = to_executorch(prog)
    program = Runtime.get().load_program(manager.buffer)
    method = program.load_method("forward")
    with torch.no_grad():
        torch.testing.assert_close(method.execute([tokens])[0].clone(), model(tokens),
                                   rtol=1e-5, atol=1e-5)


def test_a_dynamic_chunked_pte_equals_eager_at_three_sizes() -> None:
    pytest.importorskip("executorch")
    from executorch.runtime import Runtime

    from tensorplan.integrations.executorch import to_executorch

    model, args, dynamic = _dynamic_stack()
    prog = tp.compile(model, args, dynamic_shapes=dynamic, chunks=4)
    assert prog.chunking.chosen.chunks == 4
    program = Runtime.get().load_program(to_executorch(prog).buffer)  # owns the bytes
    method = program.load_method("forward")
    for blocks in (2, 7, 16):
        tokens = torch.randint(0, 50, (1, 8 * blocks))
        with torch.no_grad():
            torch.testing.assert_close(method.execute([tokens])[0].clone(), model(tokens),
                                       rtol=1e-5, atol=1e-5)


def test_a_dynamic_gpt2_is_chunked_at_every_size_of_its_range():
    """GPT-2 slices its position table to the length: read past the dim's bound the rules
    would see another model, so they are read at a size inside the range."""
    pytest.importorskip("transformers")
    from tensorplan.zoo import hf

    model = hf._gpt2_model()
    blocks = torch.export.Dim("blocks", min=2, max=8)
    prog = tp.compile(model, (hf._tokens(32),), dynamic_shapes=({1: 8 * blocks},),
                      chunks="auto")
    assert (prog.chunking.declined, prog.chunking.chosen.chunks) == ("", 8)
    assert prog.plan.arena_bytes == 288_768 < prog.chunking.candidates[0].arena_bytes == 430_080
    for seq in (16, 40, 64):
        tokens = hf._tokens(seq)
        assert torch.equal(prog.run(tokens), prog.exported_program.module()(tokens))
        torch.testing.assert_close(prog.run(tokens), model(tokens))
    plain = tp.compile(model, (hf._tokens(32),), dynamic_shapes=({1: hf._seq_dim()},),
                       chunks="auto")
    assert (plain.chunking.declined, plain.chunking.chosen.chunks) == ("", 8)
    assert plain.plan.arena_bytes == 288_768  # the padded rows written over by the loop
    for seq in (2, 37, 64):
        tokens = hf._tokens(seq)
        torch.testing.assert_close(plain.run(tokens), model(tokens))


def test_the_chunk_table_explains_its_columns():
    from rich.console import Console

    from tensorplan.report.chunks import chunking_table

    gpt = tp.zoo.example("tiny_gpt")
    prog = tp.compile(gpt.model, gpt.args, dynamic_shapes=gpt.dynamic_shapes, chunks="auto")
    console = Console(width=200, record=True)
    console.print(chunking_table(prog.chunking))
    text = console.export_text()
    assert prog.chunking.chosen.chunks == 16  # seq: a plain Dim, chunked as a loop
    assert any(line.split("│")[1].strip() == "16" and line.rstrip("│ ").endswith("yes")
               for line in text.splitlines() if line.count("│") > 2)
    assert "chunks: how many pieces of token rows each region runs in" in text
    assert "estimated peak: the bytes live at the busiest step" in text
