"""Every matrix product of a shipped ``.pte`` on a fast kernel (``integrations/executorch/
rewrite.py``, issue 52): no ``addmm.out`` left, the values equal to eager in ExecuTorch's
runtime, the constants no larger than ExecuTorch's own program's.

Each program here is lowered once per test process (``_shipped``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

pytest.importorskip("executorch")

from executorch.exir import to_edge  # noqa: E402
from test_executorch_pte import _execute  # noqa: E402

import tensorplan as tp  # noqa: E402
from tensorplan import zoo  # noqa: E402
from tensorplan.integrations.executorch import Shipped, lower  # noqa: E402
from tensorplan.integrations.executorch.kernels import slow_products  # noqa: E402
from tensorplan.integrations.executorch.rewrite import (  # noqa: E402
    ProductRewrites,
    fast_products,
)


def _kernels(manager: Any) -> list[str]:
    """The kernel of every instruction of the program's first method, by name."""
    plan = manager.executorch_program.execution_plan[0]
    names = [f"{o.name}.{o.overload}" for o in plan.operators]
    return [names[i.instr_args.op_index] for chain in plan.chains
            for i in chain.instructions if hasattr(i.instr_args, "op_index")]


def _constant_bytes(manager: Any) -> int:
    return sum(len(b.storage) for b in manager.executorch_program.constant_buffer)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


@functools.cache
def _shipped(name: str, chunks: int | None = None) -> tuple[zoo.Example, Shipped, int]:
    """A tiny zoo transformer in ``chunks`` chunks (BERT in four by default), shipped without
    folding; with the constant bytes of ExecuTorch's own default program of the model
    (unchunked: ExecuTorch 1.5.1's emitter fails a static view of a loop's stacked output,
    which tensorplan's planning pass settles)."""
    example = zoo.example(name)
    program = tp.compile(example.model, example.args,
                         chunks=chunks or (4 if name == "hf_bert" else None))
    with torch.no_grad():
        theirs = to_edge(tp.capture(example.model, example.args)).to_executorch()
    return example, lower(program, fold=False), _constant_bytes(theirs)


@pytest.mark.parametrize(("name", "chunks"), [("hf_bert", None), ("hf_gpt2", None),
                                              ("hf_gpt2", 4)])
def test_a_shipped_transformer_has_no_addmm_and_equals_eager(name: str, chunks: int | None
                                                             ) -> None:
    """The chunked GPT-2's queries, keys and values are three products over the columns of
    one weight (``rewrite/columns.py``): each on a fast kernel too, and the weight stored
    once."""
    example, shipped, their_constants = _shipped(name, chunks)
    kernels = _kernels(shipped.manager)
    assert "aten::addmm.out" not in kernels
    assert "aten::linear.out" in kernels
    with torch.no_grad():
        expected = _tensors(example.model(*example.args))
    for got, want in zip(_execute(shipped.manager.buffer, list(example.args)), expected,
                         strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert shipped.constant_bytes <= their_constants


def test_a_chunked_berts_chunks_share_one_weight_and_copy_no_transpose() -> None:
    """A loop's body takes a weight's transpose of the weight it is passed: every product
    becomes ``linear`` (13: 8 of them in the bodies of the loops, emitted once each) and no
    weight is transposed at run time."""
    _, shipped, _ = _shipped("hf_bert")
    assert shipped.products == ProductRewrites(linears=5 + 8, stored_transposed=0, split=0)
    assert _kernels(shipped.manager).count("aten::linear.out") == 13
    kept = shipped.manager.exported_program()
    signature = kept.graph_signature
    constants = {*signature.inputs_to_parameters, *signature.inputs_to_buffers,
                 *signature.inputs_to_lifted_tensor_constants}
    transposes = [n for n in kept.graph.nodes if "permute_copy" in str(n.target)]
    assert transposes and not any(n.args[0].name in constants for n in transposes)


def test_gpt2s_conv1d_weights_are_stored_transposed() -> None:
    """GPT-2's ``Conv1D`` is ``addmm(b, x, w)``: each ``w`` (4 per layer) is stored
    transposed and read by ``linear``; the tied head's transpose is dropped."""
    _, shipped, their_constants = _shipped("hf_gpt2")
    assert shipped.products == ProductRewrites(linears=1, stored_transposed=8, split=0)
    assert shipped.constant_bytes == their_constants


# --- the rules on small graphs --------------------------------------------------------------
class Shared(torch.nn.Module):
    """Two products of one weight's transpose, an ``addmm`` of a constant and one of an
    activation."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(24, 16))
        self.b = torch.nn.Parameter(torch.randn(24))
        self.c = torch.nn.Parameter(torch.randn(24, 8))
        self.d = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        w_t = self.w.t()
        first = torch.addmm(self.b, x[:5], w_t)
        second = torch.addmm(self.b, x[5:], w_t)
        h = torch.addmm(self.d, torch.cat([first, second]), self.c)
        return torch.addmm(self.d, h, y)


def _edge(model: torch.nn.Module, args: tuple) -> Any:
    with torch.no_grad():
        return to_edge(torch.export.export(model, args))


def _targets(edge: Any) -> list[str]:
    return [n.target.__name__ for n in edge.exported_program().graph.nodes
            if n.op == "call_function"]


def test_each_rule_moves_its_products_and_keeps_the_values() -> None:
    model, args = Shared().eval(), (torch.randn(9, 16), torch.randn(8, 8))
    edge = _edge(model, args)
    assert fast_products(edge.exported_program()) == ProductRewrites(2, 1, 1)
    targets = _targets(edge)
    assert "aten.addmm.default" not in targets and "aten.permute_copy.default" not in targets
    assert targets.count("aten.linear.default") == 3 and targets.count("aten.mm.default") == 1
    constants = {tuple(v.shape) for v in [*edge.exported_program().state_dict.values(),
                                          *edge.exported_program().constants.values()]}
    assert constants == {(24, 16), (24,), (8, 24), (8,)}  # c (24, 8) stored as (8, 24)
    with torch.no_grad():
        expected = model(*args)
    torch.testing.assert_close(_execute(edge.to_executorch().buffer, list(args))[0], expected)


def test_a_runtime_with_no_slow_product_keeps_constants_and_addmm_of_activations() -> None:
    edge = _edge(Shared().eval(), (torch.randn(9, 16), torch.randn(8, 8)))
    assert fast_products(edge.exported_program(), slow=frozenset()) == ProductRewrites(2, 0, 0)
    assert _targets(edge).count("aten.addmm.default") == 2


class Tied(torch.nn.Module):
    """A constant read by a product and by an add: it stays as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))
        self.b = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.b, x, self.w) + self.w


def test_a_constant_read_by_other_ops_is_not_transposed_and_its_addmm_is_split() -> None:
    model, x = Tied().eval(), torch.randn(8, 8)
    edge = _edge(model, (x,))
    assert fast_products(edge.exported_program()) == ProductRewrites(0, 0, 1)
    with torch.no_grad():
        torch.testing.assert_close(_execute(edge.to_executorch().buffer, [x])[0], model(x))


def test_the_slow_product_kernels_are_the_measured_ones() -> None:
    assert slow_products("1.5.1") == frozenset({"aten::addmm.out", "aten::convolution.out"})
    assert slow_products("0.0.0") == frozenset()


class Pointwise(torch.nn.Module):
    """A 3x3 stem, a 1x1 convolution with a bias, ReLU, a 1x1 without, and a strided 1x1."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.expand = torch.nn.Conv2d(8, 32, 1)
        self.project = torch.nn.Conv2d(32, 8, 1, bias=False)
        self.strided = torch.nn.Conv2d(8, 4, 1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(torch.relu(self.expand(self.stem(x))))
        return self.strided(y + x.mean(1, keepdim=True))


def test_a_pointwise_convolution_runs_on_mm_with_its_weight_stored_as_a_matrix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule 4: the two 1x1 convolutions of stride 1 become ``mm`` (ExecuTorch's
    ``convolution.out`` is a naive loop); the 3x3 and the strided 1x1 stay. Equal to eager in
    ExecuTorch's runtime; the constants as many bytes as before (each weight and bias stored
    once, reshaped); the arena no larger than without the rule."""
    torch.manual_seed(0)
    model, x = Pointwise().eval(), torch.randn(1, 3, 16, 16)
    edge = _edge(model, (x,))
    constant_bytes = sum(v.nbytes for v in edge.exported_program().state_dict.values())
    assert fast_products(edge.exported_program()).pointwise == 2
    targets = _targets(edge)
    assert targets.count("aten.convolution.default") == 2
    assert targets.count("aten.mm.default") == 2
    state = edge.exported_program()
    shapes = {tuple(v.shape) for v in [*state.state_dict.values(), *state.constants.values()]}
    assert {(32, 8), (32, 1, 1), (8, 32)} <= shapes and (32, 8, 1, 1) not in shapes
    assert sum(v.nbytes for v in [*state.state_dict.values(), *state.constants.values()]) \
        == constant_bytes
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(_execute(edge.to_executorch().buffer, [x])[0], expected,
                               rtol=1e-5, atol=1e-5)
    program = tp.compile(model, (x,))
    shipped = lower(program, check=True)
    assert shipped.products.pointwise == 2 and shipped.check.matches
    assert _kernels(shipped.manager).count("aten::mm.out") == 2
    monkeypatch.setattr("tensorplan.integrations.executorch.rewrite.slow_products",
                        lambda: frozenset({"aten::addmm.out"}))  # a runtime with a fast one
    unmoved = lower(program)
    assert unmoved.products.pointwise == 0
    assert shipped.arena_bytes <= unmoved.arena_bytes
