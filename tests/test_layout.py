"""Layout rules: dim orders from traced values, and when two orders are the same memory."""

from __future__ import annotations

import torch

from tensorplan.specs.layout import dense_strides, same_layout, traced_dim_order


def test_size_one_dims_do_not_change_the_layout():
    assert same_layout((2, 3, 1, 1), (0, 1, 2, 3), (0, 2, 3, 1))
    assert same_layout((2, 1, 4, 5), (0, 1, 2, 3), (0, 2, 3, 1))
    assert not same_layout((2, 3, 4, 5), (0, 1, 2, 3), (0, 2, 3, 1))
    assert not same_layout((2, 3), (0, 1), (0, 1, 2))


def test_empty_tensors_have_one_layout():
    assert same_layout((0, 2), (1, 0), (0, 1))


def test_dense_strides_follow_the_dim_order():
    assert dense_strides((2, 3, 4, 5), (0, 1, 2, 3)) == (60, 20, 5, 1)
    assert dense_strides((2, 3, 4, 5), (0, 2, 3, 1)) == (60, 1, 15, 3)
    assert dense_strides((3, 0), (1, 0)) == (1, 3)


def test_traced_dim_order_is_torchs_canonical_choice():
    t = torch.empty(2, 1, 4, 5, memory_format=torch.channels_last)
    assert traced_dim_order(t) == (0, 2, 3, 1) == t.dim_order()
    assert traced_dim_order(torch.empty(2, 5, 3).transpose(1, 2)) == (0, 2, 1)
