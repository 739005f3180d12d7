"""A hard arena budget: ``compile(..., max_arena_bytes=N)`` and ``tensorplan plan --max-arena``;
sizes that would not fit 64 bits are refused."""

from __future__ import annotations

import pytest
import torch
from shared_models import Fn, positives

import tensorplan as tp
from tensorplan import zoo
from tensorplan.cli import main
from tensorplan.cli.options import parse_bytes
from tensorplan.plan.budget import COMMAND_LINE, Rewrite, check_arena, largest_fitting
from tensorplan.plan.plan import MemoryPlan, PlannedStorage


def plan_of(arena: int, lower_bound: int) -> MemoryPlan:
    """Three storages: x [0, 2) and relu [1, 3) overlap at step 1; neg [2, 4) sits above."""
    storages = {0: PlannedStorage(0, 0, 64, 0, 2, "input", "", ("x",)),
                1: PlannedStorage(1, 64, 32, 1, 3, "activation", "", ("relu", "view")),
                2: PlannedStorage(2, 96, 16, 2, 4, "activation", "", ("neg",))}
    return MemoryPlan(arena, lower_bound, "greedy", 16, False, storages, ())


def test_a_plan_that_fits_returns_its_headroom():
    assert check_arena(plan_of(112, 96), 128) == 16
    assert check_arena(plan_of(112, 96), 112) == 0
    assert check_arena(plan_of(112, 96)) is None


def test_over_the_lower_bound_the_error_says_how_much_where_and_what_is_live():
    with pytest.raises(tp.PlanError) as info:
        check_arena(plan_of(112, 96), 80)
    assert str(info.value) == (
        "plan: the arena needs 112 B, 32 B over the budget of 80 B; the peak is at step 1, "
        "96 B live, the largest there: x 64 B, relu 32 B; no plan of this program as compiled "
        "fits: its lower bound is 96 B; lower the batch or the input sizes, or split the model")


def test_between_the_lower_bound_and_the_arena_the_error_suggests_the_optimal_planner():
    with pytest.raises(tp.PlanError, match=r"112 B, 12 B over the budget of 100 B; .* its "
                                           r"lower bound of 96 B fits: try "
                                           r"algorithm='optimal'"):
        check_arena(plan_of(112, 96), 100)


def test_compile_with_a_budget_raises_below_the_arena_and_returns_the_program_at_it():
    example = zoo.example("mlp")
    arena = tp.compile(example.model, example.args).plan.arena_bytes
    with pytest.raises(tp.PlanError, match=f"the arena needs {arena:,} B, 100 B over the "
                                           f"budget of {arena - 100:,} B; the peak is at step"):
        tp.compile(example.model, example.args, max_arena_bytes=arena - 100)
    prog = tp.compile(example.model, example.args, max_arena_bytes=arena)
    torch.testing.assert_close(prog.run(*example.args), example.model(*example.args))


def test_a_budget_must_be_a_number_of_bytes():
    with pytest.raises(tp.PlanError, match="max_arena_bytes must be a number of bytes"):
        check_arena(plan_of(112, 96), -1)


def test_an_arena_above_64_bits_is_refused():
    with pytest.raises(tp.PlanError, match="more than a 64-bit size holds"):
        check_arena(plan_of(2**63, 96))


def test_a_bound_whose_bytes_overflow_64_bits_is_an_unbounded_shape_error():
    def fn(x):
        y = positives(x)
        torch._check(y.shape[0] <= 2**62)  # 2**64 bytes of float32
        return y * 2
    with pytest.raises(tp.UnboundedShapeError, match=r"node 'positives' .* would take "
                                                     r"18,446,744,073,709,551,616 B"):
        tp.compile(Fn(fn), (torch.randn(6),))


@pytest.mark.parametrize("text, count", [("256KiB", 262144), ("256 kib", 262144),
                                         ("1.5MB", 1_500_000), ("4096", 4096), ("2GiB", 2**31),
                                         ("10B", 10)])
def test_byte_counts_are_read_with_their_unit(text, count):
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "12XB", "-5", "KiB"])
def test_a_malformed_byte_count_is_an_input_error(text):
    with pytest.raises(tp.InputError, match="is not a byte count"):
        parse_bytes(text)


def test_cli_max_arena_fails_with_one_line_or_prints_the_headroom(capsys):
    assert main(["plan", "zoo:mlp", "--max-arena", "1KiB"]) == 2
    error = capsys.readouterr().err
    assert "over the budget of 1,024 B; the peak is at step" in error
    assert error.count("\n") == 1
    assert main(["plan", "zoo:mlp", "--max-arena", "1MiB"]) == 0
    assert "fits the budget of 1,048,576 B with " in capsys.readouterr().out


@pytest.fixture(scope="module")
def tiny_gpt() -> tuple[zoo.Example, tp.Program]:
    """zoo:tiny_gpt (seq in [2, 128]) and its program, whose arena at seq=128 is 655,872 B."""
    example = zoo.example("tiny_gpt")
    return example, tp.compile(example.model, example.args,
                               dynamic_shapes=example.dynamic_shapes)


def test_the_largest_fitting_size_fits_and_the_next_does_not(tiny_gpt):
    _, prog = tiny_gpt
    plan, budget = prog.plan, 300_000
    (seq,) = plan.symbolic.dims
    size = largest_fitting(plan, seq, budget)
    assert size == 82
    assert plan.arena_bytes_at(seq=size) <= budget < plan.arena_bytes_at(seq=size + 1)
    assert largest_fitting(plan, seq, plan.arena_bytes_at(seq=2) - 1) is None
    assert largest_fitting(plan, seq, plan.arena_bytes) == 128


def test_a_dynamic_model_over_budget_is_told_the_largest_size_that_fits(tiny_gpt, capsys):
    example, prog = tiny_gpt
    fits = prog.plan.arena_bytes_at(seq=82)
    hint = f"at seq <= 82 the arena is {fits:,} B, within the budget: give seq max=82; "
    with pytest.raises(tp.PlanError) as info:
        tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes,
                   max_arena_bytes=300_000)
    assert str(info.value).endswith(
        "no plan of this program as compiled fits: its lower bound is 655,872 B; " + hint +
        'chunks="auto" plans 320,512 B (still over)')
    assert "Dim maxima" not in str(info.value)
    assert main(["plan", "zoo:tiny_gpt", "--max-arena", "300000"]) == 2
    assert capsys.readouterr().err.rstrip().endswith(hint + "--chunks auto plans 320,512 B "
                                                      "(still over)")


def test_a_cnn_over_budget_is_told_the_arena_patches_reach(capsys):
    """zoo:convnet: 393,216 B as exported (its lower bound too), less patch by patch."""
    example = zoo.example("convnet")
    patched = tp.compile(example.model, example.args, patches="auto").patching.chosen
    assert patched.split and patched.arena_bytes < 300_000
    with pytest.raises(tp.PlanError) as info:
        tp.compile(example.model, example.args, max_arena_bytes=300_000)
    assert str(info.value).endswith(
        "no plan of this program as compiled fits: its lower bound is 393,216 B; "
        f'patches="auto" plans {patched.arena_bytes:,} B, within the budget')
    assert main(["plan", "zoo:convnet", "--max-arena", "300000"]) == 2
    error = capsys.readouterr().err
    assert error.rstrip().endswith(f"; --patches auto plans {patched.arena_bytes:,} B, within "
                                   "the budget")
    assert "Dim" not in error


def test_a_static_transformer_over_budget_is_told_the_arena_chunks_reach():
    """tiny_gpt at 128 tokens, static: 655,872 B as exported, about half in chunks."""
    model, tokens = zoo.example("tiny_gpt").model, (torch.randint(0, 256, (1, 128)),)
    chunked = tp.compile(model, tokens, chunks="auto").chunking.chosen
    assert chunked.chunks > 1
    with pytest.raises(tp.PlanError) as info:
        tp.compile(model, tokens, max_arena_bytes=chunked.arena_bytes)
    assert str(info.value).endswith(
        f'its lower bound is 655,872 B; chunks="auto" plans {chunked.arena_bytes:,} B, within '
        "the budget")


def test_rewrites_are_listed_those_that_fit_first_in_the_spelling_asked_for():
    asked = []

    def rewrites() -> list[Rewrite]:
        asked.append(True)
        return [Rewrite("patches", 90), Rewrite("chunks", 70), Rewrite("patches", 112)]
    assert check_arena(plan_of(112, 96), 112, rewrites) == 0
    assert not asked  # only made for an arena over its budget
    with pytest.raises(tp.PlanError) as info:
        check_arena(plan_of(112, 96), 80, rewrites, COMMAND_LINE)
    assert str(info.value).endswith(
        "no plan of this program as compiled fits: its lower bound is 96 B; --chunks auto "
        "plans 70 B, within the budget; --patches auto plans 90 B (still over)")
    with pytest.raises(tp.PlanError) as info:
        check_arena(plan_of(112, 96), 100, rewrites)
    assert str(info.value).endswith(
        "its lower bound of 96 B fits: try algorithm='optimal' with a longer time_limit; "
        'chunks="auto" plans 70 B, within the budget; patches="auto" plans 90 B, within the '
        "budget")


def test_a_rewrite_that_fails_while_suggesting_leaves_the_budget_error(monkeypatch):
    """Over the budget, ``compile`` tries ``chunks="auto"`` to say what it would plan; when
    that raises, the user still gets the budget's ``PlanError``, without the suggestion."""
    def refuse(*args, **kwargs):
        raise tp.UnboundedShapeError("propagate: a size with no finite upper bound")

    monkeypatch.setattr("tensorplan.program.choose_chunks", refuse)
    example = zoo.example("tiny_gpt")
    with pytest.raises(tp.PlanError, match="over the budget of 262,144 B") as info:
        tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes,
                   max_arena_bytes=256 * 1024)
    assert "chunks=" not in str(info.value)
