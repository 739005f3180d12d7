"""The independent checker: it must catch every overlap, misalignment and negative offset,
and say which kind of rule each problem breaks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorplan.errors import PlanError
from tensorplan.plan.validate import (
    Violation,
    ViolationKind,
    check_placement,
    find_escapes,
    find_violations,
    plan_error,
)


def _messages(violations: list[Violation]) -> list[str]:
    return [v.message for v in violations]


def test_valid_plan_has_no_problems():
    # 0 and 1 share steps, so they are stacked; 2 starts when 0 ends and reuses its bytes
    assert find_violations([4, 4, 4], [0, 1, 2], [2, 3, 4], [0, 4, 0]) == []


def test_overlapping_pair_is_reported_with_bytes_and_lifetimes():
    problems = find_violations([8, 8], [0, 3], [5, 9], [0, 4])
    assert problems == [Violation(
        ViolationKind.OVERLAP, (0, 1),
        "buffer 0 bytes [0, 8) live [0, 5) overlaps buffer 1 bytes [4, 12) live [3, 9)",
    )]


def test_touching_lifetimes_may_share_bytes():
    assert find_violations([8, 8], [0, 5], [5, 9], [0, 0]) == []


def test_zero_size_buffers_hold_no_bytes():
    assert find_violations([0, 8], [0, 0], [4, 4], [4, 0]) == []


def test_misaligned_and_negative_offsets():
    problems = find_violations([16, 16], [0, 5], [5, 9], [8, -16], alignment=16)
    assert _messages(problems) == [
        "buffer 0: offset 8 is not a multiple of 16",
        "buffer 1: offset -16 is negative",
    ]
    # a negative offset puts bytes below the arena's start
    assert [(v.kind, v.buffers) for v in problems] == [
        (ViolationKind.ALIGNMENT, (0,)), (ViolationKind.OUT_OF_ARENA, (1,))]


def test_length_mismatch_is_a_problem():
    assert find_violations([1, 2], [0], [1], [0]) == [Violation(
        ViolationKind.LENGTH_MISMATCH, (), "length mismatch: 2 sizes, 1 starts, 1 ends, 1 offsets"
    )]


def test_a_buffer_above_the_peak_is_out_of_the_arena():
    (problem,) = find_violations([4, 4], [0, 0], [1, 1], [0, 4], peak=7)
    assert problem == Violation(ViolationKind.OUT_OF_ARENA, (1,),
                                "buffer 1 ends at byte 8, above the reported peak 7")


def test_a_buffer_leaving_its_region_is_outside_it():
    problems = find_escapes((16, 32), "the region of 'cond'", [8, 8, 16], [16, 28, 8],
                            labels=[7, 9, 11], names=["storage 7", "storage 9", "storage 11"])
    assert problems == [
        Violation(ViolationKind.OUTSIDE_REGION, (9,),
                  "storage 9 at [28, 36) leaves the region of 'cond' at [16, 32)"),
        Violation(ViolationKind.OUTSIDE_REGION, (11,),
                  "storage 11 at [8, 24) leaves the region of 'cond' at [16, 32)"),
    ]


def test_labels_and_names_say_which_buffers_collide():
    (problem,) = find_violations([8, 8], [0, 0], [2, 2], [0, 4], labels=[3, "cond"],
                                 names=["storage 3", "the region of 'cond'"])
    assert problem.kind is ViolationKind.OVERLAP and problem.buffers == (3, "cond")
    assert problem.message == ("storage 3 bytes [0, 8) live [0, 2) overlaps the region of "
                               "'cond' bytes [4, 12) live [0, 2)")


def test_plan_error_lists_the_first_messages_with_the_stage():
    error = plan_error(find_violations([4, 4], [0, 0], [1, 1], [0, 2]), "plan")
    assert isinstance(error, PlanError)
    assert str(error) == ("plan: invalid memory plan (1 problem): buffer 0 bytes [0, 4) live "
                          "[0, 1) overlaps buffer 1 bytes [2, 6) live [0, 1)")


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
    found = find_violations(sizes, starts, ends, offsets)
    assert (found == []) == _pairwise_ok(sizes, starts, ends, offsets)
