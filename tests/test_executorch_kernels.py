"""The measured kernel table (``integrations/executorch/kernels.py``), measured again.

Every entry of the installed runtime's table gets a program in which the op's ``out`` is
placed on the bytes of the listed argument (which dies there); the program is lowered by
``to_executorch``, the link is checked in the written plan (same arena, same offset), and the
program is run by ExecuTorch's runtime on odd sizes and compared with eager PyTorch. An op
outside the table (``addmm``) is never given an overlapping ``out``; forced onto one, its kernel
gives wrong values, which is why it is not in the table. A pad's input is made in the tail of
its output exactly where every block the kernel copies is read a block past where it is
written; forced anywhere else in the tail, the kernel refuses (0x12).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("executorch")

from executorch.runtime import Runtime  # noqa: E402

from tensorplan.integrations.executorch import kernels, links, lower  # noqa: E402
from tensorplan.integrations.executorch.links import op_key  # noqa: E402

SHAPE = (3, 37, 41)  # odd sizes: no kernel's vector width divides them


def _positive(x: torch.Tensor) -> torch.Tensor:
    return x.exp()


# op key -> (function of the dying value h and a second live tensor y, how h is made)
UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "aten::abs.out": torch.abs, "aten::ceil.out": torch.ceil, "aten::cos.out": torch.cos,
    "aten::exp.out": torch.exp, "aten::floor.out": torch.floor, "aten::gelu.out": F.gelu,
    "aten::hardtanh.out": F.hardtanh, "aten::log.out": lambda h: torch.log(_positive(h)),
    "aten::neg.out": torch.neg, "aten::reciprocal.out": lambda h: torch.reciprocal(h + 3),
    "aten::relu.out": torch.relu, "aten::round.out": lambda h: torch.round(h * 10),
    "aten::rsqrt.out": lambda h: torch.rsqrt(_positive(h)), "aten::sigmoid.out": torch.sigmoid,
    "aten::sin.out": torch.sin, "aten::sqrt.out": lambda h: torch.sqrt(_positive(h)),
    "aten::tanh.out": torch.tanh, "aten::clamp.out": lambda h: torch.clamp(h, -0.3, 0.4),
    "aten::leaky_relu.out": F.leaky_relu, "aten::elu.out": F.elu, "aten::erf.out": torch.erf,
    "aten::_softmax.out": lambda h: torch.softmax(h, -1),
    "aten::_log_softmax.out": lambda h: torch.log_softmax(h, -1),
    "aten::pow.Tensor_Scalar_out": lambda h: h ** 3,
    "aten::native_layer_norm.out": lambda h: F.layer_norm(h, h.shape[-1:]),
}
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "aten::add.out": torch.add, "aten::sub.out": torch.sub, "aten::mul.out": torch.mul,
    "aten::div.out": lambda a, b: a / (b.abs() + 1), "aten::maximum.out": torch.maximum,
    "aten::minimum.out": torch.minimum,
    "aten::pow.Tensor_Tensor_out": torch.pow,
    "aten::where.self_out": lambda a, b: torch.where(a > b, a, b),
}


class Unary(torch.nn.Module):
    """``op(h)`` where ``h = x.cos()`` dies at the op."""

    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x.cos())


class Binary(torch.nn.Module):
    """``op(a, b)`` with ``a = exp(x) > 0``, where only the operand ``dying`` ("self": the
    first, "other": the second) dies at the op (the other one is also returned);
    ``broadcast`` makes the live one broadcast."""

    def __init__(self, op: Callable, dying: str, broadcast: bool) -> None:
        super().__init__()
        self.op, self.dying, self.broadcast = op, dying, broadcast

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = x.exp(), y.sin()
        if self.broadcast:
            a, b = (a, b[:1, :1]) if self.dying == "self" else (a[:1, :1], b)
        live = b if self.dying == "self" else a
        return self.op(a, b), live * 1


class BatchNorm(torch.nn.Module):
    """Inference batch norm of a value that dies there."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(SHAPE[0]).eval()
        with torch.no_grad():
            self.norm.running_mean.uniform_(-1, 1)
            self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.cos())


def _run(model: torch.nn.Module, args: tuple, kernel_table=None):
    """Lower with tensorplan (order and folding off: the link is the only change), return the
    written graph and ExecuTorch's outputs."""
    exported = torch.export.export(model, args)
    shipped = lower(exported, reorder=False, fold=False, kernels=kernel_table)
    program = Runtime.get().load_program(shipped.manager.buffer)
    outputs = program.load_method("forward").execute(list(args))
    # the outputs live in the program's memory: copy them before it is freed
    return shipped, shipped.manager.exported_program().graph_module, [o.clone() for o in outputs]


def _linked(graph_module: torch.fx.GraphModule, key: str) -> set[str]:
    """Schema names of the arguments of the ops ``key`` whose bytes the op's first out starts
    on (same arena, same offset)."""
    found = set()
    for node in graph_module.graph.nodes:
        if op_key(node.target) != key:
            continue
        outs = [v for k, v in node.kwargs.items() if k.startswith("out")]
        out = outs[0].meta["spec"]
        for argument, arg in zip(node.target._schema.arguments, node.args, strict=False):
            spec = getattr(arg, "meta", {}).get("spec")
            if hasattr(spec, "mem_offset") and spec.mem_id == out.mem_id \
                    and spec.mem_offset == out.mem_offset and not spec.const:
                found.add(argument.name)
    return found


def _operands(key: str) -> list[str]:
    """The table's arguments of op ``key`` in schema order."""
    namespace, _, name = key.partition("::")
    op_name, _, overload = name.partition(".")
    schema = getattr(getattr(getattr(torch.ops, namespace), op_name), overload)._schema
    return [a.name for a in schema.arguments if a.name in TABLE[key]]


def _expected(model: torch.nn.Module, args: tuple) -> list[torch.Tensor]:
    with torch.no_grad():
        result = model(*args)
    return list(result) if isinstance(result, tuple) else [result]


TABLE = kernels.overlap_safe()


def test_installed_runtime_is_measured() -> None:
    assert kernels.installed_version() in kernels.OVERLAP_SAFE
    assert TABLE, "no measured table for the installed ExecuTorch"
    assert "aten::addmm.out" not in TABLE and "aten::mm.out" not in TABLE
    assert kernels.overlap_safe("0.0.0") == {} and kernels.cat_in_slices("0.0.0") is False
    assert kernels.pad_in_tail("0.0.0") is False


def test_every_entry_has_a_measurement() -> None:
    measured = set(UNARY) | set(BINARY) | {"aten::_native_batch_norm_legit_no_training.out"}
    assert set(TABLE) == measured
    assert set(kernels.byte_copies()) == set(COPIES)


class Copy(torch.nn.Module):
    """A reshape (or alias) of a value that dies there, returned: ExecuTorch keeps it a copy."""

    def __init__(self, op: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x.cos() * 2)


COPIES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "aten::view_copy.out": lambda h: h.reshape(-1, SHAPE[-1] * SHAPE[-2]),
    "aten::alias_copy.out": torch.ops.aten.alias.default,
}


@pytest.mark.parametrize("key", sorted(COPIES))
def test_byte_copy_out_over_its_input(key: str) -> None:
    model, x = Copy(COPIES[key]), torch.randn(*SHAPE)
    shipped, graph, outputs = _run(model, (x,))
    assert _linked(graph, key) == {"self"}
    torch.testing.assert_close(outputs[0], _expected(model, (x,))[0])


@pytest.mark.parametrize("key", sorted(UNARY))
def test_unary_out_over_its_input(key: str) -> None:
    assert TABLE[key] <= {"self", "input"}
    x = torch.randn(*SHAPE)
    shipped, graph, outputs = _run(Unary(UNARY[key]), (x,))
    assert _linked(graph, key) == TABLE[key], f"{key}: out not placed on the dying input"
    torch.testing.assert_close(outputs[0], _expected(Unary(UNARY[key]), (x,))[0])


@pytest.mark.parametrize("broadcast", [False, True])
@pytest.mark.parametrize("dying", ["self", "other"])
@pytest.mark.parametrize("key", sorted(BINARY))
def test_binary_out_over_the_dying_argument(key: str, dying: str, broadcast: bool) -> None:
    operands = _operands(key)
    assert len(operands) == 2, f"{key}: both operands are measured here"
    model, args = Binary(BINARY[key], dying, broadcast), (torch.randn(*SHAPE),
                                                          torch.randn(*SHAPE))
    shipped, graph, outputs = _run(model, args)
    expected = operands[0 if dying == "self" else 1]
    assert expected in _linked(graph, key), f"{key}: out not placed on the dying {expected}"
    for actual, expected in zip(outputs, _expected(model, args), strict=True):
        torch.testing.assert_close(actual, expected)


def test_inference_batch_norm_out_over_its_input() -> None:
    key = "aten::_native_batch_norm_legit_no_training.out"
    model, x = BatchNorm(), torch.randn(2, *SHAPE)
    shipped, graph, outputs = _run(model, (x,))
    assert _linked(graph, key) == {"input"}
    torch.testing.assert_close(outputs[0], _expected(model, (x,))[0])


class Concat(torch.nn.Module):
    """A dim-0 ``cat`` of two values made for it; a dim-1 ``cat`` behind a size-1 dim."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.cat([x.sin(), y.cos(), x.exp()], 0)
        return rows, torch.cat([x[None].tanh(), y[None].relu()], 1)


def test_cat_inputs_made_in_their_slices() -> None:
    assert kernels.cat_in_slices()
    args = (torch.randn(4, 8), torch.randn(4, 8))
    shipped, graph, outputs = _run(Concat(), args)
    assert shipped.methods["forward"].concat == 5
    for actual, expected in zip(outputs, _expected(Concat(), args), strict=True):
        torch.testing.assert_close(actual, expected)


class Padded(torch.nn.Module):
    """A pad (fill 0.5) of ``h = 2 cos(x)``, which dies there."""

    def __init__(self, pads: tuple[int, ...]) -> None:
        super().__init__()
        self.pads = pads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x.cos() * 2, self.pads, value=0.5).sin()


# (pads, input shape, input made in the output's tail): odd sizes; placed exactly when the
# padding written after the last block the kernel copies is at least a block
PADS = [
    ((0, 1, 0, 1), (2, 5, 37, 41), True),  # MobileNetV2's pad before a strided conv, batch 2
    ((1, 1, 1, 1), (1, 3, 37, 41), True),
    ((2, 2, 2, 2, 2, 2), (1, 3, 5, 7, 9), True),  # 3-D padding of a 5-D input
    ((1, 0, 1, 0), (1, 3, 37, 41), False),  # nothing after the last row
    ((0, 3), (3, 37, 41), False),  # 3 after the last row of 41
    ((0, 0, 0, 0, 1, 2), (2, 3, 7, 9), False),  # channels: a block is a whole image
]


def _pad_in_tail(graph_module: torch.fx.GraphModule) -> bool:
    """True when the pad's input lies inside its output's bytes, past their start."""
    pad = next(n for n in graph_module.graph.nodes if op_key(n.target) == links.PAD_OP)
    given, out = pad.args[0].meta["spec"], pad.kwargs["out"].meta["spec"]
    return given.mem_id == out.mem_id and out.mem_offset < given.mem_offset \
        and given.mem_offset + given.nbytes() <= out.mem_offset + out.nbytes()


@pytest.mark.parametrize(("pads", "shape", "placed"), PADS)
def test_pad_input_in_the_tail_of_its_output(pads: tuple[int, ...], shape: tuple[int, ...],
                                             placed: bool) -> None:
    assert kernels.pad_in_tail()
    model, x = Padded(pads), torch.randn(*shape)
    shipped, graph, outputs = _run(model, (x,))
    assert _pad_in_tail(graph) == placed
    assert shipped.methods["forward"].concat == int(placed)
    torch.testing.assert_close(outputs[0], _expected(model, (x,))[0])


class PaddedInput(torch.nn.Module):
    """A pad of the graph's input itself, or of a ``relu`` written over it."""

    def __init__(self, relu: bool) -> None:
        super().__init__()
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x.relu() if self.relu else x, (0, 1, 0, 1), value=0.5).sin()


@pytest.mark.parametrize("relu", [False, True])
def test_pad_of_a_graph_input_in_its_tail(relu: bool) -> None:
    model, x = PaddedInput(relu), torch.randn(2, 5, 37, 41)
    shipped, graph, outputs = _run(model, (x,))
    assert _pad_in_tail(graph)
    torch.testing.assert_close(outputs[0], _expected(model, (x,))[0])


def test_pad_forced_into_its_tail_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement behind the condition: an input whose last block overlaps where it is
    written (a pad with nothing after it), placed at the end of the output anyway, makes the
    runtime's kernel refuse the call."""
    monkeypatch.setattr(links, "_tail_offset", lambda pads, shape, padded, itemsize, alignment,
                        room: room // alignment * alignment)
    x = torch.randn(1, 3, 37, 41)
    shipped = lower(torch.export.export(Padded((1, 0, 1, 0)), (x,)), reorder=False, fold=False)
    assert _pad_in_tail(shipped.manager.exported_program().graph_module)
    program = Runtime.get().load_program(shipped.manager.buffer)
    with pytest.raises(RuntimeError, match="0x12"):
        program.load_method("forward").execute([x])


class Linear(torch.nn.Module):
    """``addmm`` over a value that dies there (its weight used as stored: no transpose; the
    tests below empty the table of slow product kernels, so the product stays an ``addmm``
    instead of becoming ``linear`` of the weight stored transposed)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(41, 41))
        self.bias = torch.nn.Parameter(torch.randn(41))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.cos(), self.weight)


def _overlapping(graph_module: torch.fx.GraphModule, key: str) -> bool:
    """True when an op ``key``'s out shares a byte with one of its arguments."""
    for node in graph_module.graph.nodes:
        if op_key(node.target) != key:
            continue
        out = node.kwargs["out"].meta["spec"]
        for arg in node.all_input_nodes:
            spec = arg.meta.get("spec")
            if arg is node.kwargs["out"] or not hasattr(spec, "mem_offset") or spec.const:
                continue
            if spec.mem_id == out.mem_id and spec.mem_offset < out.mem_offset + out.nbytes() \
                    and out.mem_offset < spec.mem_offset + spec.nbytes():
                return True
    return False


@pytest.fixture
def addmm_kept(monkeypatch) -> None:
    """``rewrite.py`` moves no product off ``addmm.out``."""
    monkeypatch.setitem(kernels.SLOW_PRODUCTS, kernels.installed_version(), frozenset())


@pytest.mark.usefixtures("addmm_kept")
def test_addmm_outside_the_table_never_overlaps() -> None:
    model, x = Linear().eval(), torch.randn(37, 41)
    shipped, graph, outputs = _run(model, (x,))
    assert not _overlapping(graph, "aten::addmm.out")
    torch.testing.assert_close(outputs[0], _expected(model, (x,))[0])


@pytest.mark.usefixtures("addmm_kept")
def test_addmm_forced_onto_its_input_is_wrong() -> None:
    """The measurement that keeps ``addmm`` out of the table: given the overlap, the runtime's
    kernel returns values that differ from eager."""
    x = torch.randn(37, 41)
    forced = {**TABLE, "aten::addmm.out": frozenset({"mat1"})}
    model = Linear().eval()
    shipped, graph, outputs = _run(model, (x,), forced)
    assert _overlapping(graph, "aten::addmm.out")
    assert not torch.allclose(outputs[0], _expected(model, (x,))[0], atol=1e-3)
