"""The node orders the ExecuTorch planning pass tries (``integrations/executorch/order.py``):
each runs a unit after everything it reads, and every one of them ships a ``.pte`` that equals
eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("executorch")

from executorch.exir import memory, to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402
from test_executorch_pte import _resized  # noqa: E402

from tensorplan.integrations.executorch import lower, order, planning_pass  # noqa: E402


class Split(nn.Module):
    """A split whose pieces go different ways: ExecuTorch writes the pieces into one list
    ``alloc`` and its readers take them by ``getitem`` of that alloc, not of the split (as
    SD3's joint attention splits its modulation into six)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c = torch.split(x * 2.0, [4, 4, 8], dim=-1)
        return torch.cat([torch.relu(a) * b, torch.sigmoid(c[..., :4])], dim=-1) + 1.0


def _graph(model: nn.Module, x: torch.Tensor) -> torch.fx.Graph:
    with torch.no_grad():
        manager = to_edge(torch.export.export(model, (x,))).to_executorch()
    return manager.exported_program().graph


def test_every_order_reads_a_split_piece_after_the_split() -> None:
    graph = _graph(Split(), torch.randn(3, 16))
    shared = [n for n in graph.nodes if n.op == "call_function" and n.target is memory.alloc
              and len(n.users) > 1]
    assert len(shared) == 1  # the split's list of three pieces
    writer = next(u for u in shared[0].users if shared[0] in u.kwargs.values())
    orders = order.candidate_orders(graph, None, frozenset())
    assert set(orders) == {"exported", "memory-greedy", "depth-first"}
    for name, nodes in orders.items():
        position = {node: i for i, node in enumerate(nodes)}
        readers = [u for u in shared[0].users if u is not writer]
        assert len(readers) == 3, name
        assert all(position[r] > position[writer] for r in readers), name


@pytest.mark.parametrize("kept", ["memory-greedy", "depth-first"])
def test_a_pte_in_each_order_equals_eager(monkeypatch, kept: str) -> None:
    """The depth-first order once ran the readers of SD3's split before the split (its
    ``.pte`` was 1.9 off eager)."""
    candidates = order.candidate_orders

    def only(graph, signature, planned):
        return {"exported": candidates(graph, signature, planned)[kept]}

    monkeypatch.setattr(planning_pass, "candidate_orders", only)
    x = torch.randn(3, 16)
    shipped = lower(torch.export.export(Split(), (x,)), fold=False)
    program = Runtime.get().load_program(shipped.manager.buffer)  # owns the bytes
    method = program.load_method("forward")
    torch.testing.assert_close(method.execute([x])[0].clone(), Split()(x))


@pytest.mark.parametrize("name", ["tiny_gpt", pytest.param("hf_bert_dynamic",
                                                           marks=pytest.mark.slow)])
@pytest.mark.parametrize("kept", ["exported", "memory-greedy", "depth-first"])
def test_every_order_of_a_dynamic_model_runs_equal_to_eager_across_its_range(
        monkeypatch, name: str, kept: str) -> None:
    """Issue 19 saw a depth-first or memory-greedy ``.pte`` of the dynamic tiny_gpt refused by
    ExecuTorch's runtime (``et_view.cpp``: a view's numel); each order, shipped with folding as
    ``to_executorch`` does, runs at the dim's smallest, an odd and its largest size."""
    import tensorplan as tp
    from tensorplan import zoo

    candidates = order.candidate_orders

    def only(graph, signature, planned):
        found = candidates(graph, signature, planned)  # an order equal to another is dropped
        return {"exported": found.get(kept, found["exported"])}

    monkeypatch.setattr(planning_pass, "candidate_orders", only)
    example = zoo.example(name)
    program = tp.capture(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
    (bounds,) = program.range_constraints.values()
    loaded = Runtime.get().load_program(lower(program).manager.buffer)  # owns the bytes
    method = loaded.load_method("forward")
    for size in (int(bounds.lower), 17, int(bounds.upper)):
        args = _resized(example, size)
        with torch.no_grad():
            expected = example.model(*args)
        expected = expected if isinstance(expected, torch.Tensor) else expected[0]
        torch.testing.assert_close(method.execute(list(args))[0].clone(), expected)
