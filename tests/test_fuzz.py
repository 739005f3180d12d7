"""Random programs through the whole pipeline: compile -> verify -> run equals eager.

Each program mixes elementwise, broadcast, view, reduction, cat/split, matmul, layout-changing
and data-dependent (``nonzero``, a broadcast ``masked_select``) ops on random shapes (size-0 and
size-1 dims included; ``cat`` with a 1-D ``(0,)`` tensor, ``split`` with an empty piece), dtypes
(float32, float16, int64, bool) and input layouts (contiguous, channels_last, a permuted view),
with and without a dynamic dim (whose range starts at 0 or at 2; from 0 it also runs at 0 and
1). The ops are drawn against the example values, so every drawn program runs eagerly; one
torch.export cannot capture (a guard on the dynamic dim) is discarded. Every failure this test
found is replayed by name in ``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import pytest
import torch
from fuzz_programs import OPS, Input, Recipe, Step, check_program, compile_recipe
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tensorplan as tp

DTYPES = (torch.float32, torch.float16, torch.int64, torch.bool)
FLOATS = (torch.float32, torch.float16)
NUMBERS = (torch.float32, torch.float16, torch.int64)
MAX_STEPS = 8
SIZES = st.sampled_from([0, 1, 2, 3, 4, 1, 2, 3, 4])  # a dim's example size: 0 one draw in 9


@st.composite
def inputs(draw, dynamic: bool) -> tuple[Input, ...]:
    count = draw(st.integers(1, 2))
    made = []
    for i in range(count):
        rank = draw(st.sampled_from([1, 2, 3, 4, 4]))
        shape = tuple(draw(st.lists(SIZES, min_size=rank, max_size=rank)))
        layouts = ["contiguous", "permuted"] + (["channels_last"] if rank == 4 else [])
        layout = draw(st.sampled_from(layouts))
        dynamic_dim = None
        if dynamic and i == 0:
            dynamic_dim = draw(st.integers(0, rank - 1))
            shape = tuple(max(s, 2) if d == dynamic_dim else s for d, s in enumerate(shape))
        made.append(Input(shape, draw(st.sampled_from(DTYPES)), layout, dynamic_dim))
    return tuple(made)


Choice = tuple[str, tuple, tuple]  # (op, other operands, params)


def _elementwise(values: list[torch.Tensor], i: int) -> list[Choice]:
    a = values[i]
    found: list[Choice] = []
    if a.dtype in FLOATS:
        found += [("relu", (), ()), ("sigmoid", (), ()), ("half", (), ())]
    if a.dtype in NUMBERS:
        found += [("neg", (), ()), ("abs", (), ()), ("affine", (), ()), ("float", (), ())]
    if a.dtype == torch.bool:
        found += [("not", (), ()), ("long", (), ()), ("float", (), ())]
    for j, b in enumerate(values):
        if b.shape != a.shape:
            continue
        if a.dtype == torch.bool and b.dtype == torch.bool:
            found.append(("and", (j,), ()))
        elif a.dtype != torch.bool and b.dtype != torch.bool:
            found += [("add", (j,), ()), ("mul", (j,), ()), ("maximum", (j,), ())]
        if a.dtype == torch.bool and b.dtype != torch.bool:
            found.append(("where", (j, j), ()))
    return found


def _per_dim(values: list[torch.Tensor], i: int) -> dict[str, list[Choice]]:
    a = values[i]
    found: dict[str, list[Choice]] = {"broadcast": [], "view": [], "reduction": [], "cat": []}
    for dim in range(a.dim()):
        size = a.shape[dim]
        found["view"] += [("slice_step", (), (("dim", dim),)), ("unsqueeze", (), (("dim", dim),))]
        found["cat"] += [("cat", (i,), (("dim", dim),)),
                         ("split", (), (("dim", dim), ("size", max(size // 2, 1)), ("index", 0))),
                         ("split_empty", (), (("dim", dim), ("size", size // 2),
                                              ("index", size % 3))),
                         ("cat_legacy_empty", (), (("dim", dim), ("first", size % 2 == 0)))]
        if size == 1:
            found["view"] += [("squeeze", (), (("dim", dim),)), ("expand", (), (("dim", dim),))]
        found["broadcast"].append(("add_first", (), (("dim", dim),)) if a.dtype != torch.bool
                                  else ("or_any", (), (("dim", dim),)))
        if a.dtype in NUMBERS:
            found["cat"].append(("cat_derived", (), (("dim", dim),)))
            found["broadcast"].append(("add_max", (), (("dim", dim),)))
            for keepdim in (False, True):
                found["reduction"] += [("sum", (), (("dim", dim), ("keepdim", keepdim))),
                                       ("amax", (), (("dim", dim), ("keepdim", keepdim)))]
        if a.dtype in FLOATS:
            found["reduction"].append(("mean", (), (("dim", dim), ("keepdim", True))))
    if a.dim() > 1:
        found["view"] += [("flatten", (), ()), ("transpose", (), (("i", 0), ("j", a.dim() - 1)))]
    return found


def _layout(a: torch.Tensor) -> list[Choice]:
    found: list[Choice] = [("clone", (), ()), ("contiguous", (), ())]
    if a.dim() < 4:
        found.append(("expand_batch", (), ()))
    if a.dtype in NUMBERS:
        found.append(("add_in_place", (), ()))
    if a.dim() >= 2:
        found.append(("permute", (), (("dims", tuple(reversed(range(a.dim())))),)))
    if a.dim() == 4:
        found += [("to_channels_last", (), ()), ("clone_channels_last", (), ())]
    return found


def _candidates(values: list[torch.Tensor], i: int) -> dict[str, list[Choice]]:
    """The ops valid on value ``i`` by kind (elementwise, broadcast, view, reduction, cat/split,
    matmul, layout), for a draw to pick a kind and then an op."""
    a = values[i]
    kinds = {"elementwise": _elementwise(values, i), **_per_dim(values, i),
             "matmul": ([("matmul", (), ()), ("batched_matmul", (), ())]
                        if a.dim() >= 2 and a.dtype in NUMBERS else []),
             "layout": _layout(a)}
    kinds["data-dependent"] = [("nonzero", (), ())] + [
        ("masked_select", (j,), ()) for j, b in enumerate(values)
        if b.dtype != torch.bool and _broadcasts(a.shape, b.shape)]
    return {kind: ops for kind, ops in kinds.items() if ops}


def _broadcasts(a: torch.Size, b: torch.Size) -> bool:
    try:
        torch.broadcast_shapes(a, b)
    except RuntimeError:
        return False
    return True


@st.composite
def recipes(draw) -> Recipe:
    given_inputs = draw(inputs(draw(st.booleans())))
    dynamic_min = draw(st.sampled_from([0, 2]))
    recipe = Recipe(given_inputs, (), (), dynamic_min)
    values = list(recipe.example())
    steps = []
    for _ in range(draw(st.integers(1, MAX_STEPS))):
        i = draw(st.integers(0, len(values) - 1))
        kinds = _candidates(values, i)
        op, others, params = draw(st.sampled_from(kinds[draw(st.sampled_from(sorted(kinds)))]))
        step = Step(op, (i, *others), params)
        try:
            result = step.apply(values)
        except (RuntimeError, IndexError):  # an op eager refuses here (amax of an empty dim)
            continue
        if result.numel() > 4096:
            continue
        steps.append(step)
        values.append(result)
    computed = range(len(given_inputs), len(values))
    last = len(values) - 1
    extra = draw(st.lists(st.sampled_from(list(computed) or [last]), max_size=2))
    if draw(st.integers(0, 9)) == 0:
        extra.append(0)  # an input returned as it is
    return Recipe(given_inputs, tuple(steps), tuple(dict.fromkeys([last, *extra])), dynamic_min)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, derandomize=True, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(recipes())
def test_random_programs_compile_verify_and_run_like_eager(recipe):
    assert set(OPS) >= {step.op for step in recipe.steps}
    try:
        prog = compile_recipe(recipe)
    except tp.CaptureError:
        assume(False)  # torch.export guards on the dynamic dim: not a program to plan
    check_program(recipe, prog)
