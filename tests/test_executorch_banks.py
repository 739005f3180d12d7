"""Memory banks in a ``.pte`` (issue 19, items 3-4): each bank its own ``mem_id``, run by
ExecuTorch's runtime, and ExecuTorch's own ``banked_greedy`` on the same program and capacities,
both measured by one traffic count (``integrations.executorch.banks.mem_id_traffic``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

pytest.importorskip("executorch")

import executorch_reference  # noqa: E402,F401,I001  (puts benchmarks/ on the path)
import common  # noqa: E402  (benchmarks/common.py)
from executorch.exir.banked_memory_planning import BankPlacementError  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402
from test_banks import Hot  # noqa: E402
from test_executorch_pte import _eager, _resized  # noqa: E402

import tensorplan as tp  # noqa: E402
from tensorplan import zoo  # noqa: E402
from tensorplan.banks import moves as bank_moves  # noqa: E402
from tensorplan.integrations.executorch import lower  # noqa: E402

KIB = 1024
_INPUTS = torch.Generator().manual_seed(0)
ARGS = (torch.randn(64, 64, generator=_INPUTS), torch.randn(32, 32, generator=_INPUTS))
SUM_RTOL = 1e-5  # Hot returns a sum of about 14,000 over 4,096 + 8 x 4,096 terms: the
#                  runtime's sums add in another order than torch's (1.4e-6 apart seen)


def _exported() -> torch.export.ExportedProgram:
    return torch.export.export(Hot(), ARGS)


def _run(manager) -> torch.Tensor:
    program = Runtime.get().load_program(manager.buffer)  # one buffer per planned mem_id
    method = program.load_method("forward")  # its outputs live in its memory: copy them out
    return method.execute(list(ARGS))[0].clone()


def test_a_two_bank_pte_runs_in_executorchs_runtime_equal_to_eager() -> None:
    banks = [tp.Bank("sram", 16 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    shipped = lower(_exported(), banks=banks)
    sizes = list(shipped.manager.executorch_program.execution_plan[0].non_const_buffer_sizes)
    plan = shipped.methods["forward"]
    assert sizes == [0, *plan.bank_arenas] and len(plan.bank_arenas) == 2
    assert plan.bank_arenas[0] <= 16 * KIB + 64
    assert plan.traffic_cost == plan.traffic_cost_bound  # proven optimal
    torch.testing.assert_close(_run(shipped.manager), Hot()(*ARGS),
                               rtol=SUM_RTOL, atol=0)


def test_ours_serves_more_from_sram_than_banked_greedy_at_one_count() -> None:
    banks = [tp.Bank("sram", 16 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    greedy = common.lower_banked_greedy(_exported(), banks)
    ours = lower(_exported(), banks=banks).manager
    theirs, mine = common.banked_result(greedy, banks), common.banked_result(ours, banks)
    # largest-first gives sram the 16 KiB input; ours the four values read nine times each
    assert theirs.traffic == (33_444, 233_472) and mine.traffic == (201_284, 65_536)
    assert mine.cost < 0.35 * theirs.cost
    torch.testing.assert_close(_run(greedy), Hot()(*ARGS),
                               rtol=SUM_RTOL, atol=0)
    torch.testing.assert_close(_run(ours), Hot()(*ARGS),
                               rtol=SUM_RTOL, atol=0)


def test_a_capacity_where_banked_greedy_fails_and_ours_fits() -> None:
    banks = [tp.Bank("sram", 16 * KIB + 64, 1.0), tp.Bank("dram", 4 * KIB + 16, 40.0)]
    with pytest.raises(BankPlacementError, match="No declared bank can hold"):
        common.lower_banked_greedy(_exported(), banks)
    shipped = lower(_exported(), banks=banks)
    arenas = shipped.methods["forward"].bank_arenas
    assert arenas[0] <= banks[0].capacity and arenas[1] <= banks[1].capacity
    torch.testing.assert_close(_run(shipped.manager), Hot()(*ARGS),
                               rtol=SUM_RTOL, atol=0)


def test_a_pin_in_the_pte_keeps_the_input_in_its_bank() -> None:
    banks = [tp.Bank("sram", 32 * KIB, 1.0), tp.Bank("dram", None, 40.0)]
    shipped = lower(_exported(), banks=banks, pin={"x": "dram"})
    graph = shipped.manager.exported_program().graph_module.graph
    x = next(n for n in graph.nodes if n.op == "placeholder" and n.name == "x")
    assert x.meta["spec"].mem_id == 2
    torch.testing.assert_close(_run(shipped.manager), Hot()(*ARGS),
                               rtol=SUM_RTOL, atol=0)


def test_a_pin_naming_no_node_is_refused() -> None:
    banks = [tp.Bank("sram", 32 * KIB, 1.0), tp.Bank("dram", None, 40.0)]
    with pytest.raises(tp.InputError, match="cannot pin 'nothing'.*placeholders are .*x, y"):
        lower(_exported(), banks=banks, pin={"nothing": "dram"})


class Early(torch.nn.Module):
    """Two 4 KiB values each read six times in a row; the first is read once more at the end."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.sin(x)
        h = a
        for _ in range(6):
            h = h + a
        b = torch.cos(y)
        g = b
        for _ in range(6):
            g = g * b
        return h.sum() + g.sum() + a.mean()


def _copied(model: nn.Module, banks: list[tp.Bank], **options) -> tuple:
    """The model lowered with and without copies between banks: both plans, the copies made
    and the graph they are in. The plan with copies is checked: proven optimal, its cost the
    one traffic count's, run equal to eager in ExecuTorch's runtime."""
    args = (torch.randn(32, 32), torch.randn(32, 32))
    exported = torch.export.export(model, args)
    one_bank_each = lower(exported, fold=False, banks=banks, moves=False, **options)
    copied = lower(exported, fold=False, banks=banks, **options)  # copies: on by default
    graph = copied.manager.exported_program().graph_module.graph
    copies = [n for n in graph.nodes if n.op == "call_function"
              and n.target.__name__ == "_to_dim_order_copy.out"]
    after = copied.methods["forward"]
    assert after.traffic_cost == after.traffic_cost_bound  # no choice costs less
    assert common.banked_result(copied.manager, banks).cost == after.traffic_cost
    program = Runtime.get().load_program(copied.manager.buffer)
    out = program.load_method("forward").execute(list(args))[0].clone()
    torch.testing.assert_close(out, model(*args))
    return one_bank_each.methods["forward"], after, copies, graph


def _copy_banks(copies: list[torch.fx.Node]) -> list[tuple[str, int, int]]:
    """(value copied, its mem_id, the copy's mem_id) of each copy."""
    return [(c.args[0].name, c.args[0].meta["spec"].mem_id, c.meta["spec"].mem_id)
            for c in copies]


def test_a_copy_between_banks_lowers_the_cost_and_runs_equal_to_eager() -> None:
    banks = [tp.Bank("sram", 12 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    before, after, copies, _ = _copied(Early(), banks, reuse=False)
    assert (before.traffic_cost, after.traffic_cost) == (1_134_628, 503_844)
    # one of the two values is copied once between the banks (``b`` is written in dram and
    # copied into sram for its six reads)
    assert _copy_banks(copies) == [("aten_cos_default", 2, 1)]


class Chain(nn.Module):
    """``a`` is made in place (``relu`` over a product), read six times, then idle while ``b``
    is read six times, and at the end written in place once more (``a + 1``, where it dies)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x @ x)
        h = a * 2.0
        for _ in range(5):
            h = h * a
        early = h.sum()
        b = y @ y
        g = b * 3.0
        for _ in range(5):
            g = g * b
        return early + g.sum() + (a + 1.0).mean()


def test_an_in_place_chain_is_copied_and_its_later_links_follow_the_copy() -> None:
    banks = [tp.Bank("sram", 8 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    before, after, copies, graph = _copied(Chain(), banks, reorder=False)
    assert (before.traffic_cost, after.traffic_cost) == (1_630_244, 1_159_204)
    # the chain (relu written over the product) is spilled to dram once its six reads are
    # done; the add at the end, written over ``a``, is now written over the copy
    assert _copy_banks(copies) == [("aten_relu_default", 1, 2)]
    linked = [n.name for n in graph.nodes if n.op == "call_function"
              and not n.name.startswith("alloc") and n.meta["spec"].storage_base is not None
              and n.meta["spec"].storage_base is copies[0].meta["spec"]]
    assert linked == ["aten_add_tensor_1"]


def test_copies_that_cost_more_than_promised_give_way_to_the_plan_without(monkeypatch) -> None:
    # copy options priced at nothing: the choice takes copies it cannot pay for; planned with
    # them the program costs more than the choice promised, so it is planned again without
    # them and the cheaper plan is kept
    real = bank_moves.move_options
    monkeypatch.setattr(bank_moves, "move_options", lambda index, item, banks: [
        dataclasses.replace(option, cost=0.0) for option in real(index, item, banks)])
    args = (torch.randn(32, 32), torch.randn(32, 32))
    exported = torch.export.export(Early(), args)
    banks = [tp.Bank("sram", 12 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    shipped = lower(exported, fold=False, reuse=False, banks=banks)
    plan = shipped.methods["forward"]
    assert (plan.traffic_cost, plan.bank_copies) == (1_134_628, 0)  # as with moves=False
    assert common.banked_result(shipped.manager, banks).cost == plan.traffic_cost
    program = Runtime.get().load_program(shipped.manager.buffer)
    out = program.load_method("forward").execute(list(args))[0].clone()
    torch.testing.assert_close(out, Early()(*args))


# zoo model -> (copies between banks, traffic cost) with sram at 1/4 of its single arena and an
# unbounded dram at 40x the cost (as in benchmarks/bench_banks.py): a transformer, a CNN whose
# in-place chains are copied, a transformer with many copies. MobileNetV2's pads' inputs made in
# their tails shrank its single arena (903,360 -> 571,584 B) and so its sram; at the old sram
# (225,840 B) they lower its traffic too: 195,576,616 -> 184,995,136 (3 copies). Its 1x1
# convolutions on mm (rewrite.py's rule 4: a weight read as a 2-D matrix, the image through
# views) moved it from (3, 251,498,368) to (2, 252,899,200), still proven optimal
BANKED = {"tiny_gpt": (1, 296_319_008), "hf_mobilenet_v2": (2, 252_899_200),
          "hf_llama": (8, 196_962_610)}


@pytest.mark.parametrize("name", [n if n == "tiny_gpt" else pytest.param(n, marks=pytest.mark.slow)
                                  for n in BANKED])
def test_zoo_models_with_copies_between_banks_run_equal_to_eager(name: str) -> None:
    example = zoo.example(name)
    exported = torch.export.export(example.model, example.args, example.kwargs,
                                   dynamic_shapes=example.dynamic_shapes, strict=False)
    single = lower(exported, fold=False).arena_bytes
    banks = [tp.Bank("sram", single // 4, 1.0), tp.Bank("dram", None, 40.0)]
    shipped = lower(exported, fold=False, banks=banks)
    plan = shipped.methods["forward"]
    assert (plan.bank_copies, plan.traffic_cost) == BANKED[name]
    assert plan.traffic_cost == plan.traffic_cost_bound  # proven optimal
    assert plan.bank_arenas[0] <= banks[0].capacity
    program = Runtime.get().load_program(shipped.manager.buffer)
    method = program.load_method("forward")
    sizes = (3, 64) if example.dynamic_shapes else ()  # a dynamic model at other sizes too
    for args in [example.args, *(_resized(example, size) for size in sizes)]:
        outputs = [o.clone() for o in method.execute(pytree.tree_leaves((args, example.kwargs)))]
        for got, want in zip(outputs, _eager(example.model, args, example.kwargs), strict=True):
            torch.testing.assert_close(got, want)
