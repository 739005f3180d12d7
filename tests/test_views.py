"""Views of any strides (0 strides, steps, as_strided) through compile -> run: the layout check
compares a view's memory with its traced strides, and every result equals eager."""

from __future__ import annotations

import pytest
import torch
from shared_models import Fn
from torch.export import Dim

import tensorplan as tp
from tensorplan.runtime.frames import check_view

CL = torch.channels_last


def runs_like_eager(model, args, dynamic_shapes=None, more=()) -> tp.Program:
    prog = tp.compile(model, args, dynamic_shapes=dynamic_shapes)
    for inputs in (args, *more):
        torch.testing.assert_close(prog.run(*inputs), model(*inputs))
    return prog


@pytest.mark.parametrize("shape", [(1, 3, 4, 5), (1, 3, 1, 5), (1, 3, 4, 1), (2, 3, 4, 5)])
def test_linear_on_a_channels_last_4d_input_runs(shape):
    # the weight is permuted and expanded for a batched matmul: with a batch of 1 the trace's
    # dim order of that expand differs from eager's, though both address the same memory
    model = torch.nn.Linear(shape[-1], 3)
    x = torch.randn(shape).to(memory_format=CL)
    prog = runs_like_eager(model, (x,))
    assert prog.specs["expand_1"].view_strides[1:] == (0, 1, shape[-1])


def test_linear_on_channels_last_with_a_dynamic_dim_runs_at_two_sizes():
    model = torch.nn.Linear(5, 3)
    x = torch.randn(1, 3, 4, 5).to(memory_format=CL)
    runs_like_eager(model, (x,), ({1: Dim("c", min=2, max=8)},),
                    more=[(torch.randn(1, 7, 4, 5).to(memory_format=CL),)])


def test_expand_keeps_its_zero_strides_in_the_spec_and_runs():
    model = Fn(lambda t: (t + 1).expand(4, 3, 5) * 2)
    prog = runs_like_eager(model, (torch.randn(3, 1),))
    assert prog.specs["expand"].view_strides == (0, 1, 0)
    assert prog.specs["add"].view_strides is None  # dense values record nothing more


def test_expand_of_a_dynamic_dim_runs_at_two_sizes():
    model = Fn(lambda t: (t * 3).expand(2, -1, 4).sum(0))
    runs_like_eager(model, (torch.randn(3, 1),), ({0: Dim("r", min=2, max=16)},),
                    more=[(torch.randn(11, 1),)])


@pytest.mark.parametrize("fn", [
    lambda t: (t + 1)[:, ::2] * 3,
    lambda t: (t + 1)[::2, 1::3],
    lambda t: (t - 1)[1::3, ::2].exp(),
    lambda t: torch.diagonal(t[:, :4] + 1) * 2,
    lambda t: (t + 1).unfold(1, 3, 2) * 2,
])
def test_step_slices_run(fn):
    runs_like_eager(Fn(fn), (torch.randn(5, 6),))


def test_step_slice_of_a_dynamic_dim_runs_at_two_sizes():
    prog = runs_like_eager(Fn(lambda t: (t + 1)[:, ::2] * 3), (torch.randn(4, 6),),
                           ({1: Dim("w", min=3, max=32)},), more=[(torch.randn(4, 9),)])
    assert str(prog.specs["slice_1"].view_strides[0]) == str(prog.specs["add"].sym_shape[1])
    assert prog.specs["slice_1"].view_strides[1] == 2 and prog.specs["mul"].view_strides is None


@pytest.mark.parametrize("fn", [
    lambda t: torch.as_strided(t + 1, (3, 3), (1, 3)) * 2,      # a transposed window
    lambda t: torch.as_strided(t + 1, (3, 4), (0, 2), 1).sum(0),  # 0 stride and a step
    lambda t: torch.as_strided(t * 2, (4, 3), (1, 1)) + 1,      # overlapping windows
])
def test_as_strided_windows_run(fn):
    runs_like_eager(Fn(fn), (torch.randn(4, 6),))


def test_a_view_whose_memory_differs_from_its_trace_is_a_layout_error():
    prog = tp.compile(Fn(lambda t: (t + 1).expand(4, 3, 5) * 2), (torch.randn(3, 1),))
    spec = prog.specs["expand"]
    check_view("expand", torch.empty(3, 1).expand(4, 3, 5), spec, "aten.expand.default",
               (0, 1, 0))
    with pytest.raises(tp.LayoutError, match=r"view 'expand' .* has strides \(15, 5, 1\), "
                                             r"the trace says \(0, 1, 0\)"):
        check_view("expand", torch.empty(4, 3, 5), spec, "aten.expand.default", (0, 1, 0))
