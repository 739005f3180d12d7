"""Values with no elements, through every stage: specs, alias, reuse, concatenation in place,
folding, the planners and the verifier, the runtime, JSON, the C header, the picture, the page
and saved programs. PyTorch accepts them everywhere (``cat`` even skips a 1-D ``(0,)`` input
whatever the rank of the others), so tensorplan must too, and each run equals eager."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from torch import nn
from torch.export import Dim

import tensorplan as tp
from tensorplan.report import plan_to_c_header, plan_to_json, plot_timeline, write_html

SHAPES = {1: (16,), 2: (7, 16), 3: (4, 7, 16), 4: (1, 4, 7, 16)}  # by rank; cat along dim -2


def compile_and_check(model: nn.Module, args: tuple, dynamic_shapes=None,
                      runs: list[tuple] | None = None) -> tp.Program:
    """The model compiled, its plan verified, and every run (default: the example) equal to
    eager, NaNs included."""
    prog = tp.compile(model, args, dynamic_shapes=dynamic_shapes)
    prog.plan.verify()
    for inputs in runs or [args]:
        with torch.no_grad():
            expected = model(*inputs)
        torch.testing.assert_close(prog.run(*inputs), expected, equal_nan=True)
    return prog


class CatWithEmpty(nn.Module):
    """``cat`` of two computed values with an empty input at ``position``, then ``+ 1``
    (``flip`` has no in-place form, so its result is an activation, not the input's bytes)."""

    def __init__(self, position: int, dim: int) -> None:
        super().__init__()
        self.position, self.dim = position, dim

    def forward(self, x: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
        y = x.flip(-1)
        parts = [y, y * 2]
        parts.insert(self.position, empty)
        return torch.cat(parts, dim=self.dim) + 1


@pytest.mark.parametrize("legacy", [False, True], ids=["empty-along-dim", "legacy-(0,)"])
@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_cat_with_an_empty_input_runs_like_eager_and_is_made_in_place(rank: int, position: int,
                                                                      legacy: bool) -> None:
    shape = SHAPES[rank]
    dim = -2 if rank > 1 else 0
    axis = dim % rank
    empty_shape = (0,) if legacy else tuple(0 if d == axis else s for d, s in enumerate(shape))
    x, empty = torch.randn(shape), torch.randn(empty_shape)
    prog = compile_and_check(CatWithEmpty(position, dim), (x, empty))
    assert prog.specs["cat"].shape == tuple(2 * s if d == axis else s
                                            for d, s in enumerate(shape))
    # both computed inputs are made in their slices of the cat; the empty one takes no byte
    assert {"flip", "mul"} <= set(prog.alias.slices)
    assert prog.alias.slices["flip"].offset == 0
    stride = 16 if rank > 1 else 1  # of the output along dim -2 (dim 0 for rank 1)
    assert prog.alias.slices["mul"].offset == shape[dim] * stride * 4
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes == 3 * x.numel() * 4


def test_cat_of_an_empty_cache_with_a_rank_4_key_as_in_t5s_decoder() -> None:
    """T5's decoder cache starts as a 1-D ``(0,)`` tensor and is concatenated with a
    ``(1, 4, 7, 16)`` key along dim -2 (``concat.py`` once crashed with an ``IndexError``)."""

    class Cache(nn.Module):
        def forward(self, key: torch.Tensor) -> torch.Tensor:
            cache = key.new_zeros(0)
            return torch.cat([cache, key * 2], dim=-2).softmax(-1)

    prog = compile_and_check(Cache(), (torch.randn(1, 4, 7, 16),))
    assert prog.specs["cat"].shape == (1, 4, 7, 16)


def test_a_dynamic_batch_whose_range_allows_0_and_1_runs_at_0_and_1() -> None:
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Softmax(-1)).eval()
    batch = Dim("batch", min=0, max=8)
    runs = [(torch.randn(size, 8),) for size in (0, 1, 5, 8)]
    prog = compile_and_check(model, (torch.randn(3, 8),), ({0: batch},), runs)
    assert prog.specs["input"].shape == (8, 8)
    assert prog.run(torch.randn(0, 8)).shape == (0, 4)


def test_a_view_that_leaves_its_trace_at_size_0_is_refused_like_eager() -> None:
    """``x + x.narrow(0, 0, 1)`` was traced with ``x``'s dim at least 2 (torch.export's rule);
    at 0 eager's ``narrow`` refuses, while the decomposed ``slice`` would give an empty
    tensor. The run checks each view against its trace and refuses too."""

    class First(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + x.narrow(0, 0, 1)

    size = Dim("n", min=0, max=16)
    prog = compile_and_check(First(), (torch.randn(4),), ({0: size},),
                             [(torch.randn(n),) for n in (1, 2, 16)])
    with pytest.raises(RuntimeError, match="exceeds dimension size"):
        First()(torch.randn(0))
    with pytest.raises(tp.InputError, match=r"view 'slice_1' .* has shape \(0,\), but the "
                                            r"program was traced for \(1,\)"):
        prog.run(torch.randn(0))


class SplitWithEmpty(nn.Module):
    """A split into ``[3, 0, 5]``: the middle piece is empty and its result is returned."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a, b, c = torch.split(torch.relu(x), [3, 0, 5], dim=1)
        return a * 2, b + 1, c.sum()


def _storage_of(prog: tp.Program, value: str) -> tp.PlannedStorage:
    return next(s for s in prog.plan.storages.values() if value in s.values)


def test_split_giving_an_empty_piece_has_a_zero_byte_storage() -> None:
    prog = compile_and_check(SplitWithEmpty(), (torch.randn(2, 8),))
    assert prog.specs["add"].shape == (2, 0)
    assert prog.specs["add"].nbytes == 0
    assert _storage_of(prog, "add").size == 0
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes == 64 + 32 + 16


def test_reductions_over_an_empty_dim_run_like_eager() -> None:
    class Reductions(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            y = x * 2
            return y.sum(1), y.mean(1), torch.prod(y, 1), y.amax(0), y.std(1)

    prog = compile_and_check(Reductions(), (torch.randn(3, 0),))
    sums, means, products, maxima, _ = prog.run(torch.randn(3, 0))
    assert sums.tolist() == [0.0, 0.0, 0.0] and products.tolist() == [1.0, 1.0, 1.0]
    assert means.isnan().all() and maxima.shape == (0,)


@pytest.mark.parametrize("algorithm", ["naive", "greedy", "auto", "optimal"])
def test_zero_byte_buffers_take_no_space_and_never_conflict(algorithm: str) -> None:
    buffers = [tp.Buffer(0, 0, 10), tp.Buffer(16, 0, 10), tp.Buffer(0, 3, 4), tp.Buffer(32, 2, 5)]
    placement = tp.plan_buffers(buffers, algorithm=algorithm, alignment=16)
    assert placement.peak == placement.lower_bound == 48
    assert tp.plan_buffers([tp.Buffer(0, 0, 3)] * 3, algorithm=algorithm).peak == 0


def test_an_empty_constant_is_folded_and_a_cond_takes_an_empty_operand() -> None:
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("empty", torch.zeros(0, 4))

        def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            x = torch.cat([x, self.empty * 2 + 1], 0).relu()
            return torch.cond(x.sum() > 0, lambda x, r: torch.cat([x, r], 0) * 2,
                              lambda x, r: torch.cat([r, x], 0) - 1, (x, rows))

    args = (torch.randn(3, 4), torch.randn(0, 4))
    prog = compile_and_check(Mixed(), args, runs=[args, (-torch.ones(3, 4), torch.randn(0, 4))])
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes


def test_plans_with_empty_values_are_written_drawn_saved_and_loaded(tmp_path) -> None:
    prog = compile_and_check(SplitWithEmpty(), (torch.randn(2, 8),))
    empty = _storage_of(prog, "add")
    written = json.loads(json.dumps(plan_to_json(prog, "split")))
    stored = next(s for s in written["storages"] if s["id"] == empty.id)
    assert (stored["size"], stored["offset"], stored["values"]) == (0, empty.offset, ["add"])
    header = tmp_path / "split.h"
    header.write_text(plan_to_c_header(prog, "split"))
    assert f"#define SPLIT_S{empty.id}_ADD_SIZE 0u" in header.read_text()
    source = tmp_path / "main.c"
    source.write_text('#include "split.h"\n'
                      'int main(void) { return (int)SPLIT_ARENA_BYTES - 112; }\n')
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", str(source),
                    "-o", str(tmp_path / "main")], check=True)
    assert subprocess.run([str(tmp_path / "main")]).returncode == 0
    plot_timeline(prog, tmp_path / "split.png", "split")
    assert (tmp_path / "split.png").stat().st_size > 1000
    write_html(prog, tmp_path / "split.html", "split")
    assert '"size":0' in (tmp_path / "split.html").read_text().replace(" ", "")
    prog.save(tmp_path / "split.tplan")
    loaded = tp.load(tmp_path / "split.tplan")
    x = torch.randn(2, 8)
    torch.testing.assert_close(loaded.run(x), SplitWithEmpty()(x))
