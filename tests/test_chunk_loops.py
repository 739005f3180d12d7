"""Chunks over a plain ``Dim`` as a loop (``rewrite/loop.py``; issue 47).

The token dim of the programs users export is a plain ``Dim``: any size in its range, a
multiple of nothing. Each region runs as one ``scan`` over chunks of a fixed number of rows, as
many as the rows need, the last padded; the body is planned once. Checked at the range's
smallest size, an odd size, one row below and above a chunk boundary and the largest, in
tensorplan's runtime and in ExecuTorch's.
"""

from __future__ import annotations

import pytest
import torch
from test_chunks import S, Stack

import tensorplan as tp

pytestmark = pytest.mark.usefixtures("one_thread")

SIZES = (2, 31, 33, 77, 2 * S)  # smallest, one below / above a chunk of 32, odd, largest


def _model_and_program() -> tuple[torch.nn.Module, tp.Program]:
    torch.manual_seed(0)
    model = Stack(kv_heads=2).eval()
    seq = torch.export.Dim("seq", min=2, max=2 * S)
    tokens = torch.randint(0, 50, (1, 32))  # an example of one chunk: hints are moved
    return model, tp.compile(model, (tokens,), dynamic_shapes=({1: seq},), chunks=4)


def _eager(model: torch.nn.Module, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 50, (1, rows))
    with torch.no_grad():
        return tokens, model(tokens)


def test_an_example_of_one_chunk_still_chunks_every_size() -> None:
    """The example (32 rows) runs the loop once and pads nothing: a trace reading sizes there
    would make one chunk of every size; the hints are moved inside the range first."""
    model, prog = _model_and_program()
    assert prog.chunking.chosen.chunks == 4
    stacked = [n.meta["val"][0].shape for n in prog.exported_program.graph.nodes
               if n.target is torch.ops.higher_order.scan]
    assert len(stacked) == 2  # a loop per layer, its count and its chunks' rows sizes of the dim
    assert all(isinstance(shape[0], torch.SymInt) and isinstance(shape[-2], torch.SymInt)
               for shape in stacked)
    for rows in SIZES:
        tokens, expected = _eager(model, rows)
        torch.testing.assert_close(prog.run(tokens), expected, rtol=1e-5, atol=1e-5)


def test_a_loop_runs_as_few_chunks_of_as_few_rows_as_the_size_needs() -> None:
    """Four chunks at the bound (128 rows, 32 each); at ``S`` rows, chunks of ``ceil(S / 4)``
    rows, as many as ``S`` needs: a decode step's one row is one chunk of one row, not a chunk
    of 32 padded (32x its arithmetic), and the body's values are planned at 32 rows."""
    _, prog = _model_and_program()
    loop = next(n for n in prog.exported_program.graph.nodes
                if n.target is torch.ops.higher_order.scan)
    count, rows = loop.meta["val"][0].shape[0], loop.meta["val"][0].shape[-2]
    (symbol,) = rows.node.expr.free_symbols

    def at(seq: int) -> tuple[int, int]:
        return tuple(int(size.node.expr.xreplace({symbol: seq})) for size in (count, rows))

    assert [at(seq) for seq in (1, 2, 4, 5, 33, 97, 128)] == \
        [(1, 1), (2, 1), (4, 1), (3, 2), (4, 9), (4, 25), (4, 32)]
    padded = prog.specs["add_209_loop_embedding_padded"]  # the rows the chunks read
    assert padded.shape == (1, 128, 32)  # at most 128 at every size: exact, not 4 x 32 x 32
    assert prog.specs["add_209_loop_body/_softmax"].shape == (1, 4, 32, 128)


def test_the_symbolic_plan_lists_what_a_loop_holds_at_its_bound() -> None:
    """The chunk count is ``ceil(seq / 32)``, no polynomial: the padded inputs and the
    stacked results are held at their bound, each listed with its reason."""
    _, prog = _model_and_program()
    held = prog.plan.symbolic.held
    assert any("_padded" in reason and "is not a polynomial in the dims" in reason
               for reason in held.values())
    assert all("is not a polynomial in the dims" in reason or "lives in subgraph" in reason
               for reason in held.values())
    assert prog.plan.arena_bytes_at(seq=2) < prog.plan.arena_bytes_at(seq=97) \
        < prog.plan.arena_bytes == prog.plan.arena_bytes_at(seq=2 * S)


def test_a_loop_chunked_program_saves_and_loads(tmp_path) -> None:
    model, prog = _model_and_program()
    prog.save(tmp_path / "looped.tplan")
    loaded = tp.load(tmp_path / "looped.tplan")
    assert loaded.plan.arena_bytes == prog.plan.arena_bytes
    tokens, expected = _eager(model, 45)
    assert torch.equal(loaded.run(tokens), prog.run(tokens))
    torch.testing.assert_close(loaded.run(tokens), expected, rtol=1e-5, atol=1e-5)


def test_a_loop_chunked_pte_equals_eager_at_every_size() -> None:
    """(Its instructions against the unchunked ``.pte``'s: ``test_chunk_recipes``, on a model
    whose layers are more than the loop's views.)"""
    pytest.importorskip("executorch")
    from executorch.runtime import Runtime

    from tensorplan.integrations.executorch import lower

    model, prog = _model_and_program()
    plain = tp.compile(model, (torch.randint(0, 50, (1, 32)),),
                       dynamic_shapes=({1: torch.export.Dim("seq", min=2, max=2 * S)},))
    shipped, unchunked = lower(prog), lower(plain)
    # the loop body's inputs passed whole are its parent's values: no memory of their own;
    # its arena is a region of its parent's where it runs (integrations/executorch/bodies.py)
    assert shipped.arena_bytes <= 1.05 * prog.plan.arena_bytes < unchunked.arena_bytes
    method = Runtime.get().load_program(shipped.manager.buffer).load_method("forward")
    for rows in SIZES:
        tokens, expected = _eager(model, rows)
        torch.testing.assert_close(method.execute([tokens])[0].clone(), expected,
                                   rtol=1e-5, atol=1e-5)


def test_a_loop_writes_its_stacked_result_over_the_rows_it_reads() -> None:
    """The first layer's loop is the last reader of its padded rows: its stacked result takes
    their storage (each chunk's rows are read before its result is copied over them)."""
    model, prog = _model_and_program()
    over = [(r.value, r.overwrites) for r in prog.schedule.reuses
            if r.value.endswith("_loop_scan[0]")]
    assert over == [("add_209_loop_scan[0]", "add_209_loop_getitem_chunks")]
    together = [s for s in prog.plan.storages.values() if set(over[0]) <= set(s.values)]
    assert len(together) == 1
    for rows in (2, 33, 2 * S):
        tokens, expected = _eager(model, rows)
        torch.testing.assert_close(prog.run(tokens), expected, rtol=1e-5, atol=1e-5)


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_a_saved_program_whose_dim_starts_at_zero_chunks_as_in_memory(tmp_path) -> None:
    """``Dim("batch", max=64)`` (from 0): torch.export traced it as at least 2, but the
    ShapeEnv ``torch.export.load`` rebuilds said 0, where a chunk's ``ceil(batch / 8)`` rows
    are 0 and the chunk count divides by them: the loaded program raised
    ``UnboundedShapeError`` on ``addmm_1_loop_x_padded``."""
    torch.manual_seed(0)
    model = _Mlp().eval()
    exported = torch.export.export(model, (torch.randn(8, 64),),
                                   dynamic_shapes=({0: torch.export.Dim("batch", max=64)},))
    torch.export.save(exported, tmp_path / "mlp.pt2")
    loaded = tp.compile(str(tmp_path / "mlp.pt2"), chunks="auto")
    assert loaded.plan.arena_bytes == tp.compile(exported, chunks="auto").plan.arena_bytes \
        == 32_768
    assert loaded.exported_program.range_constraints == exported.range_constraints
    for batch in (2, 9, 64):
        x = torch.randn(batch, 64)
        with torch.no_grad():
            torch.testing.assert_close(loaded.run(x), model(x))
