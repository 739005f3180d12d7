"""The independent checker: it must catch every overlap, misalignment and negative offset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.errors import PlanError
from tensorplan.validate import check_placement, find_overlaps


def test_valid_plan_has_no_problems():
    # 0 and 1 share steps, so they are stacked; 2 starts when 0 ends and reuses its bytes
    assert find_overlaps([4, 4, 4], [0, 1, 2], [2, 3, 4], [0, 4, 0]) == []


def test_overlapping_pair_is_reported_with_bytes_and_lifetimes():
    problems = find_overlaps([8, 8], [0, 3], [5, 9], [0, 4])
    assert problems == [
        "buffer 0 bytes [0, 8) live [0, 5) overlaps buffer 1 bytes [4, 12) live [3, 9)"
    ]


def test_touching_lifetimes_may_share_bytes():
    assert find_overlaps([8, 8], [0, 5], [5, 9], [0, 0]) == []


def test_zero_size_buffers_hold_no_bytes():
    assert find_overlaps([0, 8], [0, 0], [4, 4], [4, 0]) == []


def test_misaligned_and_negative_offsets():
    problems = find_overlaps([16, 16], [0, 5], [5, 9], [8, -16], alignment=16)
    assert problems == [
        "buffer 0: offset 8 is not a multiple of 16",
        "buffer 1: offset -16 is negative",
    ]


def test_length_mismatch_is_a_problem():
    assert find_overlaps([1, 2], [0], [1], [0]) == [
        "length mismatch: 2 sizes, 1 starts, 1 ends, 1 offsets"
    ]


def test_check_placement_raises_with_first_problems():
    sizes, starts, ends = [4] * 8, [0] * 8, [1] * 8
    with pytest.raises(PlanError, match=r"invalid memory plan \(7 problems\).*and 2 more"):
        check_placement(sizes, starts, ends, [0] * 8)


def test_check_placement_accepts_valid_plan_and_checks_peak():
    check_placement([4, 4], [0, 0], [1, 1], [0, 4], peak=8)
    with pytest.raises(PlanError, match="above the reported peak 7"):
        check_placement([4, 4], [0, 0], [1, 1], [0, 4], peak=7)


def _pairwise_ok(sizes, starts, ends, offsets) -> bool:
    """The obvious all-pairs definition, to cross-check the sweep."""
    for i in range(len(sizes)):
        for j in range(i):
            live = starts[i] < ends[j] and starts[j] < ends[i]
            lo_i, hi_i = offsets[i], offsets[i] + sizes[i]
            lo_j, hi_j = offsets[j], offsets[j] + sizes[j]
            if live and sizes[i] and sizes[j] and lo_i < hi_j and lo_j < hi_i:
                return False
    return True


plans = st.integers(1, 12).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 6), min_size=n, max_size=n),
        st.lists(st.tuples(st.integers(0, 8), st.integers(1, 4)), min_size=n, max_size=n),
        st.lists(st.integers(0, 12), min_size=n, max_size=n),
    )
)


@settings(max_examples=300, deadline=None)
@given(plans)
def test_sweep_agrees_with_all_pairs(plan):
    sizes, lifetimes, offsets = plan
    starts = [s for s, _ in lifetimes]
    ends = [s + length for s, length in lifetimes]
    found = find_overlaps(sizes, starts, ends, offsets)
    assert (found == []) == _pairwise_ok(sizes, starts, ends, offsets)
