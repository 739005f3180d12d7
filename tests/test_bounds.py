"""Data-dependent sizes: the planned bound holds every output the op can produce on inputs the
program accepts (what the op's inputs allow, tightened only by a torch._check), and each op
runs at its largest output."""

from __future__ import annotations

import pytest
import torch
from shared_models import Fn, positives
from torch.export import Dim

import tensorplan as tp
from tensorplan.runtime.lower import Kind


class MaskedSelect(torch.nn.Module):
    def forward(self, x, mask):
        return torch.masked_select(x, mask) * 2


class Index(torch.nn.Module):
    def forward(self, x, mask):
        return x[mask] + 1


def runs_like_eager(model, args, dynamic_shapes=None, more=()) -> tp.Program:
    prog = tp.compile(model, args, dynamic_shapes=dynamic_shapes)
    for inputs in (args, *more):
        torch.testing.assert_close(prog.run(*inputs), model(*inputs))
    return prog


def test_broadcast_masked_select_runs_at_its_largest_output():
    x, some = torch.randn(4, 1, 6), torch.rand(1, 5, 6) > 0.5
    everything = torch.ones(1, 5, 6, dtype=torch.bool)
    prog = runs_like_eager(MaskedSelect(), (x, some), more=[(x, everything)])
    assert prog.specs["masked_select"].shape == (120,)  # torch's fake kernel says 24
    assert prog.run(x, everything).shape == (120,)
    superseded = [row.name for row in prog.lowering() if row.kind is Kind.SUPERSEDED]
    assert len(superseded) == 1  # torch's assert u0 <= 24, replaced by the planned bound


def test_broadcast_masked_select_with_a_dynamic_dim_is_bounded_by_the_broadcast():
    x, mask = torch.randn(3, 1), torch.rand(1, 5) > 0.5
    prog = runs_like_eager(MaskedSelect(), (x, mask), ({0: Dim("n", min=2, max=16)}, None),
                           more=[(torch.randn(16, 1), torch.ones(1, 5, dtype=torch.bool))])
    assert prog.specs["masked_select"].shape == (80,)


def test_masked_select_of_two_elements_has_a_bound_of_two_not_sys_maxsize():
    x = torch.randn(2)
    prog = runs_like_eager(MaskedSelect(), (x, x > 0), more=[(x, torch.ones(2, dtype=torch.bool))])
    assert prog.specs["masked_select"].shape == (2,) and prog.plan.arena_bytes <= 64


def test_unique_of_a_dynamic_input_is_bounded_by_its_numel():
    model = Fn(lambda t: torch.unique(t) + 1)
    prog = runs_like_eager(model, (torch.randint(0, 5, (10,)),), ({0: Dim("n", min=2, max=64)},),
                           more=[(torch.arange(64),), (torch.zeros(3, dtype=torch.int64),)])
    assert prog.specs["_unique2"][0].shape == (64,)


def test_unique_with_counts_runs_at_its_largest_output():
    def fn(t):
        values, counts = torch.unique(t, return_counts=True)
        return values * 2, counts
    prog = runs_like_eager(Fn(fn), (torch.randint(0, 3, (12,)),), more=[(torch.arange(12),)])
    assert prog.specs["_unique2"][0].shape == (12,)


def test_nonzero_of_a_broadcast_sum_runs_with_every_element_nonzero():
    class NonZero(torch.nn.Module):
        def forward(self, x, y):
            return torch.nonzero((x + y) > 0)
    prog = runs_like_eager(NonZero(), (torch.randn(3, 1), torch.randn(1, 4)),
                           more=[(torch.ones(3, 1), torch.ones(1, 4))])
    assert prog.specs["nonzero"].shape == (12, 2)


@pytest.mark.parametrize("mask_shape, dim", [((5,), 0), ((5, 3), 0)])
def test_boolean_mask_index_runs_with_every_element_selected(mask_shape, dim):
    x = torch.randn(5, 3)
    prog = runs_like_eager(Index(), (x, torch.rand(mask_shape) > 0.5),
                           more=[(x, torch.ones(mask_shape, dtype=torch.bool))])
    assert prog.specs["index"].shape[dim] == torch.Size(mask_shape).numel()


def test_a_torch_check_tighter_than_the_op_limit_is_the_bound():
    def fn(t):
        found = torch.nonzero(t)
        torch._check(found.shape[0] <= 4)
        return found + 1
    prog = runs_like_eager(Fn(fn), (torch.tensor([0.0, 1, 0, 2, 0, 3, 0, 0]),))
    assert prog.specs["nonzero"].shape == (4, 1)
    with pytest.raises(tp.InputError, match=r"above its planned upper bound \(4, 1\)"):
        prog.run(torch.ones(8))


def test_a_custom_op_takes_its_checked_bound_and_runs_at_it():
    def fn(t):
        y = positives(t)
        torch._check(y.shape[0] <= 6)
        return y * 2
    prog = runs_like_eager(Fn(fn), (torch.randn(10),), more=[(torch.arange(-3.0, 7.0),)])
    assert prog.specs["positives"].shape == (6,)
    with pytest.raises(tp.InputError, match=r"above its planned upper bound \(6,\)"):
        prog.run(torch.ones(10))


def test_a_torch_check_on_a_broadcast_masked_select_keeps_its_bound_and_assert():
    class Checked(torch.nn.Module):
        def forward(self, x, mask):
            y = torch.masked_select(x, mask)
            torch._check(y.shape[0] <= 10)
            return y * 2
    x = torch.randn(4, 1, 6)
    few = torch.zeros(1, 5, 6, dtype=torch.bool)
    few[0, 0, :2] = True
    prog = runs_like_eager(Checked(), (x, few))
    assert prog.specs["masked_select"].shape == (10,)
    assert not any(row.kind is Kind.SUPERSEDED for row in prog.lowering())
