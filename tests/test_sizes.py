"""Byte counts as expressions in the dims (``sizes.py``): values, roundings, proofs over a box."""

from __future__ import annotations

import itertools

import pytest

from tensorplan.plan.symbolic.sizes import (
    Box,
    Poly,
    SizeExpr,
    Term,
    aligned_cover,
    at_least,
    term_at_least,
)

S, B = Poly.dim("seq"), Poly.dim("batch")
ONE_DIM = Box({"seq": (2, 64)})
TWO_DIMS = Box({"batch": (1, 4), "seq": (2, 64)})


def _points(box: Box):
    dims = sorted(box.ranges)
    for values in itertools.product(*(range(lo, hi + 1) for lo, hi in
                                      (box.ranges[d] for d in dims))):
        yield dict(zip(dims, values, strict=True))


def test_a_poly_evaluates_and_prints_highest_degree_first():
    p = S * S * 4 + S * 3072 + Poly.constant(16)
    assert p.evaluate({"seq": 10}) == 400 + 30720 + 16
    assert p.text() == "4*seq**2 + 3072*seq + 16"
    assert (S * B * 24 - Poly.constant(8)).text() == "24*batch*seq - 8"


@pytest.mark.parametrize("p, q, holds", [
    (S * 100, S * 50 + Poly.constant(30), True),      # no negative coefficient from seq=2 on
    (S * 50 + Poly.constant(30), S * 100, False),     # false from seq=1 on
    (S * S * 16, S * 1024 - Poly.constant(16384), True),  # a parabola's least value, worked out
    (S * S * 16, S * 1024 - Poly.constant(16000), False),  # ... which is below 0 at seq=32
    (S * B * 4, S * 4 + B * 4 - Poly.constant(4), True),  # multilinear: the corners decide
    (S * B * 4, S * 4 + B * 8 - Poly.constant(4), False),
])
def test_a_proof_is_given_exactly_when_the_inequality_holds_at_every_size(p, q, holds):
    box = TWO_DIMS if "batch" in (p - q).dims else ONE_DIM
    assert all(p.evaluate(v) >= q.evaluate(v) for v in _points(box)) is holds
    assert at_least(p, q, box) is holds


def test_the_seq_squared_case_is_not_proven_because_it_fails_below_64():
    assert not at_least(S * S, S * 64, ONE_DIM)
    assert S.evaluate({"seq": 10}) ** 2 < 64 * 10


def test_a_rounding_is_exact_at_every_size_and_aligned():
    term = Term.aligned(S * S, 16)
    assert term.atoms == ((S * S, 16),)
    assert [term.evaluate({"seq": n}) for n in (2, 3, 5, 64)] == [16, 16, 32, 4096]
    assert term.aligned_to(16) and not Term(S * S).aligned_to(16)
    assert Term.aligned(S * 3072, 16).atoms == ()           # already a multiple: no rounding
    assert Term.aligned(Poly.constant(4), 16) == Term(Poly.constant(16))


def test_an_aligned_poly_may_have_coefficients_that_are_not_multiples():
    # 8*seq*(seq - 1) is a multiple of 16 at every integer seq
    assert (S * S * 8 - S * 8).aligned_to(16)
    assert not (S * S * 8).aligned_to(16)


def test_an_aligned_cover_is_above_and_exact_at_the_bound():
    cover = aligned_cover(S * S * 8, {"seq": 64}, 16)
    assert cover.aligned_to(16)
    for n in range(0, 65):
        assert cover.evaluate({"seq": n}) >= -(-8 * n * n // 16) * 16
    assert cover.evaluate({"seq": 64}) == 8 * 64 * 64


def test_shared_roundings_cancel_in_a_proof():
    a = Term(S * 1024) + Term.aligned(S * S, 16)
    b = Term(S * 512) + Term.aligned(S * S, 16)
    assert term_at_least(a, b, ONE_DIM) and not term_at_least(b, a, ONE_DIM)
    # without the shared rounding, seq**2 must be taken at its most: 15 B over
    assert not term_at_least(Term(S * S), Term.aligned(S * S, 16), ONE_DIM)


def test_largest_drops_the_terms_below_another_and_keeps_the_max():
    box = Box({"seq": (1, 128)})
    expr = SizeExpr.largest([Term(S * 3072), Term(S * 1024), Term(Poly.constant(8192))], box)
    assert expr.text() == "max(3072*seq, 8192)"
    assert [expr.evaluate({"seq": n}) for n in (1, 2, 3, 128)] == [8192, 8192, 9216, 393216]


def test_an_expression_round_trips_through_json():
    expr = SizeExpr.largest([Term(S * B * 256) + Term.aligned(S * S, 16),
                             Term(Poly.constant(4096))], TWO_DIMS)
    assert SizeExpr.from_json(expr.to_json()) == expr
    with pytest.raises(ValueError, match="not a term"):
        SizeExpr.from_json([{"poly": []}])


def test_c_text_names_the_dims_and_the_helpers():
    expr = SizeExpr.of(Term(S * 4) + Term.aligned(S * S, 16))
    assert expr.c_text("int64_t", "mx", "al") == \
        "((((int64_t)4)*seq) + al((((int64_t)1)*seq*seq), ((int64_t)16)))"
