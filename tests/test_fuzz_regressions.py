"""Programs the random-graph test (``test_fuzz.py``) once failed on, replayed by name; each
docstring says what failed and where it was fixed."""

from __future__ import annotations

import pytest
import torch
from fuzz_programs import Input, Recipe, Step, check_program, compile_recipe

import tensorplan as tp


def test_masked_select_whose_upper_bounds_do_not_broadcast_compiles_and_runs():
    """``masked_select(x.permute(2, 1, 0), mask)`` of shapes ``(s, 2, 2)`` and ``(2, 2, s)``:
    the shapes broadcast only where ``s`` is 2, their upper bounds ``(64, 2, 2)`` and
    ``(2, 2, 64)`` not at all, and ``limits.py`` crashed in ``torch.broadcast_shapes``. Fixed
    there: the broadcast bound is the larger bound of each aligned pair of dims. At another
    ``s`` eager refuses the shapes, and so does the run."""
    recipe = Recipe(
        inputs=(Input((2, 2, 2), torch.bool, "permuted", dynamic_dim=2),),
        steps=(Step("contiguous", (0,)), Step("long", (1,)), Step("or_any", (1,), (("dim", 0),)),
               Step("cat", (0, 0), (("dim", 0),)), Step("permute", (3,), (("dims", (2, 1, 0)),)),
               Step("batched_matmul", (2,)), Step("masked_select", (5, 2))),
        outputs=(7, 2, 1, 0))
    prog = compile_recipe(recipe)
    assert prog.specs["masked_select"].shape == (64 * 2 * 64,)
    check_program(recipe, prog)


def test_a_data_dependent_size_that_export_fixed_is_checked_not_trusted():
    """``masked_select(x, x > 0).expand(3)``: export assumes the selection has 3 elements (an
    expand of size 1 would be a different program) and fixes the size to 3, so the node had no
    unbacked binding and ran as an out-variant: one selected element gave ``[3, 0, 0]`` where
    eager gives ``[3, 3, 3]``, silently. Fixed in the runtime: an op tagged
    ``dynamic_output_shape`` whose size export fixed runs as data-dependent (``lower.py``) and
    its result must have the sizes the program was traced for, else ``InputError``
    (``unbacked.py``; ``ExportedProgram.module()`` refuses the input too)."""
    recipe = Recipe(inputs=(Input((2,), torch.int64, "contiguous", dynamic_dim=0),),
                    steps=(Step("masked_select", (0, 0)), Step("expand", (1,), (("dim", 0),))),
                    outputs=(2,))
    prog = compile_recipe(recipe)
    model = recipe.module()
    x = torch.tensor([0, 3, 4, 5])
    torch.testing.assert_close(prog.run(x), model(x))
    with pytest.raises(tp.InputError, match=r"produced shape \(1,\), but torch.export traced "
                                            r"the program for \(3,\)"):
        prog.run(torch.tensor([0, 3]))
    check_program(recipe, prog)


def test_squeezing_a_data_dependent_dim_of_size_one_runs_like_eager():
    """``masked_select(m, m > 0).squeeze(0)`` of a 0-d ``m``: the trace keeps the dim (``u0``
    might not be 1), eager drops it when one element is selected. The run gives eager's 0-d
    result within the planned bound; the fuzz test's layout check compared that 0-d output
    with the rank-1 spec and failed. Fixed in the check: a layout is compared where the output
    has the spec's rank (torch's trace cannot know the rank here)."""
    recipe = Recipe(
        inputs=(Input((2, 1), torch.float16, "contiguous"),),
        steps=(Step("flatten", (0,)), Step("amax", (1,), (("dim", 0), ("keepdim", False))),
               Step("masked_select", (2, 2)), Step("squeeze", (3,), (("dim", 0),))),
        outputs=(4,))
    prog = compile_recipe(recipe)
    assert prog.specs["squeeze"].shape == (1,)
    (out,) = prog.run(torch.tensor([[1.5], [-2.0]], dtype=torch.float16))
    assert out.shape == () and out.item() == 1.5
    (nothing,) = prog.run(torch.tensor([[-1.5], [-2.0]], dtype=torch.float16))
    assert nothing.shape == (0,)
    check_program(recipe, prog)
