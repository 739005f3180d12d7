"""Plans as functions of the dynamic dims (``plan/symbolic/``: ``stack.py``, ``validate.py``):
one plan valid at every size of the range, proven; at the lower bound at every size; run, saved,
printed and written as C at the sizes a run has."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
import torch
from test_c_header import CC
from torch import nn
from torch.export import Dim

import tensorplan as tp
from tensorplan import zoo
from tensorplan.cli import main
from tensorplan.errors import FormatError, InputError
from tensorplan.formats.encoding import Fields, decode_plan, encode_plan
from tensorplan.plan.symbolic.sizes import SizeExpr
from tensorplan.plan.validate import ViolationKind
from tensorplan.report import plan_to_c_header

SEQ = Dim("seq", min=2, max=64)


class TwoBranches(nn.Module):
    """Two branches whose values have different symbolic sizes: seq x 64 floats, then
    seq x seq attention scores."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = torch.relu(x @ self.w).sum(0)
        scores = torch.softmax(x @ x.T, -1)
        return wide[:32] + (scores @ x).sum(0)


class Counter(nn.Module):
    """Keeps a running sum of its inputs in a buffer (state) while its input's length varies."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x.sum(0))
        return torch.cat([x, x], 0) * self.total


@pytest.fixture(scope="module")
def branches() -> tp.Program:
    return tp.compile(TwoBranches(), (torch.randn(16, 32),), dynamic_shapes=({0: SEQ},))


@pytest.fixture(scope="module")
def gpt() -> tuple[zoo.Example, tp.Program]:
    example = zoo.example("tiny_gpt")
    return example, tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)


def _shared_across_sizes(plan: tp.MemoryPlan) -> list[tuple[int, int]]:
    """Pairs of storages of different size expressions that use common bytes at the bounds."""
    sym = plan.symbolic
    rows = list(plan.storages.values())
    return [(a.id, b.id) for i, a in enumerate(rows) for b in rows[i + 1:]
            if sym.sizes[a.id] != sym.sizes[b.id] and not sym.sizes[a.id].is_constant
            and not sym.sizes[b.id].is_constant
            and a.offset < b.offset + b.size and b.offset < a.offset + a.size]


def test_buffers_of_different_symbolic_sizes_share_space_and_never_overlap(branches):
    plan = branches.plan
    sym = plan.symbolic
    assert [(d.name, d.lower, d.upper, d.example) for d in sym.dims] == [("seq", 2, 64, 16)]
    assert plan.violations() == []
    shared = _shared_across_sizes(plan)
    assert shared, "the seq x 64 and seq x seq values share no bytes"
    texts = {sym.sizes[s].text() for pair in shared for s in pair}
    assert "256*seq" in texts and any("seq**2" in t for t in texts)
    for seq in range(2, 65):  # every size of the range, by the concrete checker
        at = plan.at(seq=seq)
        assert at.violations() == []
        assert at.arena_bytes <= 1.05 * at.lower_bound_bytes
    assert plan.arena_bytes_at(seq=64) <= plan.arena_bytes


def test_the_arena_follows_the_size_and_runs_equal_eager(branches):
    model = TwoBranches()
    model.load_state_dict({"w": branches.exported_program.state_dict["w"]})
    assert plan_arenas(branches.plan, [2, 8, 64]) == [
        branches.plan.at(seq=n).lower_bound_bytes for n in (2, 8, 64)]
    for seq in (2, 3, 17, 64):
        x = torch.randn(seq, 32)
        torch.testing.assert_close(branches.run(x), model(x))


def plan_arenas(plan: tp.MemoryPlan, sizes: list[int]) -> list[int]:
    return [plan.arena_bytes_at(seq=n) for n in sizes]


def _overlapping_pair(plan: tp.MemoryPlan) -> tuple[int, int]:
    """Two storages live together, the second above the first at the bounds, the first's
    size growing with seq."""
    sym = plan.symbolic
    rows = sorted(plan.storages.values(), key=lambda s: s.offset)
    for low in rows:
        for high in rows:
            if (low.start < high.end and high.start < low.end and high.offset >= low.offset
                    + low.size and not sym.sizes[low.id].is_constant and high.id != low.id):
                return low.id, high.id
    raise AssertionError("no such pair")


def test_the_verifier_rejects_a_plan_that_overlaps_only_at_some_sizes(gpt):
    _, program = gpt
    plan = program.plan
    sym = plan.symbolic
    low, high = _overlapping_pair(plan)
    middle = 40
    gap = SizeExpr.constant(sym.sizes[low].evaluate({"seq": middle}))
    wrong = dataclasses.replace(sym, offsets={**sym.offsets,
                                              high: sym.offsets[low].plus(gap, sym.box)})
    bad = dataclasses.replace(plan, symbolic=wrong)
    assert bad.at(seq=middle).storages[high].offset >= bad.at(seq=middle).storages[low].offset \
        + bad.at(seq=middle).storages[low].size  # apart up to the middle
    found = [v for v in bad.violations()
             if v.kind is ViolationKind.OVERLAP and set(v.buffers) == {low, high}
             and "cannot be proven" not in v.message and not v.message.startswith("at ")]
    assert len(found) == 1
    message = found[0].message
    assert f"storage {low}" in message and f"storage {high}" in message
    seq = int(message.rsplit("seq=", 1)[1])
    assert seq > middle
    at = bad.at(seq=seq)
    a, b = at.storages[low], at.storages[high]
    assert a.offset < b.offset + b.size and b.offset < a.offset + a.size
    with pytest.raises(tp.PlanError, match=f"storage {low}"):
        bad.verify()


def test_the_verifier_rejects_a_misaligned_offset_and_a_short_reservation(gpt):
    _, program = gpt
    plan, sym = program.plan, program.plan.symbolic
    sid = next(s for s in sorted(sym.sizes) if not sym.sizes[s].is_constant)
    shifted = dataclasses.replace(sym, offsets={**sym.offsets, sid: sym.offsets[sid].plus(
        SizeExpr.constant(8), sym.box)})
    kinds = {v.kind for v in dataclasses.replace(plan, symbolic=shifted).violations()
             if sid in v.buffers}
    assert ViolationKind.ALIGNMENT in kinds
    short = dataclasses.replace(sym, sizes={**sym.sizes, sid: SizeExpr.constant(16)})
    messages = [v.message for v in dataclasses.replace(plan, symbolic=short).violations()
                if v.buffers == (sid,)]
    assert any("not proven to hold its largest value" in m for m in messages)


def test_the_dynamic_gpt_plan_is_at_its_lower_bound_at_every_size(gpt):
    _, program = gpt
    plan = program.plan
    for seq in (2, 16, 32, 64, 128):
        assert plan.arena_bytes_at(seq=seq) <= 1.05 * plan.lower_bound_at(seq=seq)
    assert plan.arena_bytes_at(seq=128) == plan.arena_bytes == 655_872
    assert [plan.arena_bytes_at(seq=n) for n in (2, 16, 64)] == [3_152, 28_736, 196_864]
    with pytest.raises(InputError, match=r"seq=129 is outside its range \[2, 128\]"):
        plan.at(seq=129)
    with pytest.raises(InputError, match="no dynamic dim named batch"):
        plan.at(batch=2)


def _tokens(seq: int) -> torch.Tensor:
    return torch.randint(0, 256, (1, seq), generator=torch.Generator().manual_seed(seq))


def test_a_growing_arena_follows_the_largest_size_run_and_equals_eager(gpt):
    example, program = gpt
    runner = program.runner()  # the default grows
    plan = program.plan
    assert runner.arena.nbytes == plan.arena_bytes_at(seq=2)
    largest = 2
    for seq in (5, 3, 40, 17, 128, 9):
        largest = max(largest, seq)
        with torch.no_grad():
            expected = example.model(_tokens(seq))
        torch.testing.assert_close(runner.run(_tokens(seq)), expected)
        assert runner.arena.nbytes == plan.arena_bytes_at(seq=largest)
    assert program.runner(arena="upper").arena.nbytes == plan.arena_bytes
    with pytest.raises(InputError, match="129"):
        runner.run(_tokens(129))


def test_the_state_stays_in_place_while_the_arena_grows():
    program = tp.compile(Counter(), (torch.randn(4, 8),), dynamic_shapes=({0: SEQ},))
    sym = program.plan.symbolic
    state = [s for s in program.plan.storages.values() if s.kind == "state"]
    assert state and all(sym.offsets[s.id].is_constant for s in state)
    runner, eager = program.runner(arena="grow"), Counter()
    for seq in (3, 30, 10, 64, 2):
        x = torch.randn(seq, 8)
        torch.testing.assert_close(runner.run(x), eager(x))
    torch.testing.assert_close(runner.state_dict()["total"], eager.total)
    assert runner.arena.nbytes == program.plan.arena_bytes_at(seq=64)


def test_the_c_header_evaluates_the_plan_at_three_sizes_like_python(gpt, tmp_path):
    _, program = gpt
    plan = program.plan
    (tmp_path / "gpt.h").write_text(plan_to_c_header(program, "gpt"))
    ids = sorted(plan.storages)
    body = ""
    for n in (3, 40, 128):
        body += f'    printf("%lld\\n", (long long)gpt_arena_bytes_at({n}));\n'
        body += "".join(f'    printf("%lld %lld\\n", (long long)gpt_storage_offset_at({sid}u, '
                        f'{n}), (long long)gpt_storage_size_at({sid}u, {n}));\n' for sid in ids)
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "gpt.h"\nint main(void) {\n' + body + "    return 0;\n}\n")
    built = subprocess.run([*CC, "main.c", "-o", "main"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stderr
    printed = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True,
                             check=True).stdout.split("\n")
    expected = []
    for n in (3, 40, 128):
        at = plan.at(seq=n)
        expected += [str(at.arena_bytes), *(f"{at.storages[sid].offset} {at.storages[sid].size}"
                                            for sid in ids)]
    assert printed[:-1] == expected
    assert expected[0] == str(plan.arena_bytes_at(seq=3)) == "4768"


def test_a_saved_program_reloads_its_symbolic_plan_without_planning_again(gpt, tmp_path):
    example, program = gpt
    program.save(tmp_path / "gpt.tp")
    loaded = tp.load(tmp_path / "gpt.tp")
    assert loaded.plan.symbolic == program.plan.symbolic
    assert loaded.plan.arena_bytes_at(seq=16) == 28_736
    with torch.no_grad():
        torch.testing.assert_close(loaded.run(_tokens(16)), example.model(_tokens(16)))


def test_a_saved_plan_whose_expressions_overlap_is_refused(gpt):
    _, program = gpt
    low, high = _overlapping_pair(program.plan)
    document = encode_plan(program.exported_program, program.roles, program.specs, program.plan,
                           program.schedule)
    document["symbolic"]["offsets"][str(high)] = document["symbolic"]["offsets"][str(low)]
    with pytest.raises(FormatError, match=f"storage {low}"):
        decode_plan(Fields(document, "plan.json"))


def test_a_static_program_keeps_its_plan_exactly():
    example = zoo.example("mlp")
    program = tp.compile(example.model, example.args)
    plan = program.plan
    assert plan.symbolic is None and plan.at() is plan and plan.arena_bytes_at() == 10_240
    assert "symbolic" not in encode_plan(program.exported_program, program.roles,
                                         program.specs, plan, program.schedule)
    assert "_at(" not in plan_to_c_header(program, "mlp")
    with pytest.raises(InputError, match="no dynamic dim"):
        plan.at(seq=3)


def test_the_cli_prints_the_plan_at_the_sizes_asked(capsys):
    assert main(["plan", "zoo:tiny_gpt", "--at", "seq=16"]) == 0
    out = capsys.readouterr().out
    assert "Memory plan at seq=16" in out
    assert "28,736 B" in out and "28,672 B" in out  # the arena and the bound at seq=16
    assert "seq in [2, 128]" in out and "arena = max(" in out


class Positives(nn.Module):
    """Keeps the positive entries (a data-dependent count) of an input of dynamic length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x > 0]
        return torch.cat([kept * 2, x], 0).sum(0, keepdim=True) + x.mean()


def test_a_data_dependent_size_is_planned_at_its_bound_with_the_reason():
    program = tp.compile(Positives(), (torch.randn(16),), dynamic_shapes=({0: SEQ},))
    held = program.plan.symbolic.held
    assert held and all("data-dependent" in why or "concatenation" in why
                        for why in held.values())
    assert any("data-dependent" in why for why in held.values())
    for seq in (2, 9, 64):
        x = torch.randn(seq)
        torch.testing.assert_close(program.run(x), Positives()(x))


def test_the_timeline_is_drawn_at_the_sizes_asked(tmp_path, capsys):
    path = tmp_path / "gpt16.svg"
    assert main(["plan", "zoo:tiny_gpt", "--at", "seq=16", "--timeline", str(path)]) == 0
    drawing = path.read_text()
    assert "tiny_gpt at seq=16" in drawing
    assert f"wrote timeline to {path}" in capsys.readouterr().out


class Gate(nn.Module):
    """A ``cond`` on a value of dynamic length: a seq x seq product in one branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def big(x: torch.Tensor) -> torch.Tensor:
            scores = (x.unsqueeze(1) * x.unsqueeze(0)).sum(-1)  # seq x seq
            return torch.relu(scores) @ x * 2

        def small(x: torch.Tensor) -> torch.Tensor:
            return x.sin() + 1

        return torch.cond(x.sum() > 0, big, small, (x,)) + x


def test_subgraph_storages_keep_their_bound_size_and_say_why():
    program = tp.compile(Gate(), (torch.randn(16, 8),), dynamic_shapes=({0: SEQ},))
    plan = program.plan
    held = plan.symbolic.held
    inside = {s.id for s in plan.storages.values() if s.graph}
    assert held and set(held) <= inside
    assert all("planned at its bounds" in why and "subgraph" in why for why in held.values())
    assert plan.violations() == []
    region = plan.regions[0]
    assert plan.at(seq=2).regions[0].size == region.size  # the region at its bound's size
    for seq in (2, 17, 64):
        for sign in (1, -1):
            x = torch.rand(seq, 8) * sign
            torch.testing.assert_close(program.run(x), Gate()(x))


class ExpandedCache(nn.Module):
    """A cache of 2 heads read by 8 query heads through an ``expand``, as grouped-query
    attention reads its KV cache: the view addresses a quarter of the bytes its shape counts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cache = x * 2                                              # seq x 2 x 4 floats
        heads = cache.unsqueeze(2).expand(-1, 2, 4, 4)  # seq x 2 x 4 x 4, a view
        return (heads.sum(0) + 1).tanh()


def test_an_expanded_view_reserves_its_base_bytes_at_every_size():
    """The symbolic plan at the bounds is the concrete plan: the ``expand`` takes no byte of
    its own. It took its shape's, 4x its base's: 8,320 B at seq 64 where the plan says 2,176,
    and the runner allocated them."""
    program = tp.compile(ExpandedCache(), (torch.randn(16, 2, 4),), dynamic_shapes=({0: SEQ},))
    plan = program.plan
    assert plan.arena_bytes_at(seq=64) == plan.arena_bytes == 2_176
    assert plan.lower_bound_at(seq=64) == plan.lower_bound_bytes == 2_176
    assert plan.arena_bytes_at(seq=3) == plan.lower_bound_at(seq=3) == 224
    runner = program.runner()
    for seq in (2, 3, 64):
        x = torch.randn(seq, 2, 4)
        torch.testing.assert_close(runner.run(x), ExpandedCache()(x))
    assert runner.arena.nbytes == 2_176
