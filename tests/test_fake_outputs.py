"""Fake values made once per distinct input metadata (``frontend/fake.py``) and a loop's value
from its body's one trace (``specs/trace.py``): what makes a chunked program over a plain
``Dim`` compile in about the time of the program as exported (issue 47, item 2).

A repeat must give what the op's own fake kernel gives: the same sizes and strides as
expressions of the dims, a view of the new input at its own offset, a dtype-changing view
computed again.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_chunks import S, Stack
from torch._dispatch.python import enable_python_dispatcher

import tensorplan as tp
from tensorplan.frontend.fake import FakeOutputs, program_shape_env
from tensorplan.specs.trace import retrace

aten = torch.ops.aten


def _symbolic_input() -> tuple[Any, torch.Tensor]:
    """A fake mode and a fake ``[s, 8]`` float tensor of a program with a dynamic dim."""
    program = tp.capture(torch.nn.Linear(8, 8), (torch.randn(5, 8),),
                         dynamic_shapes=({0: torch.export.Dim("rows", min=2, max=64)},))
    fake_mode, _ = program_shape_env(program)
    x = next(n.meta["val"] for n in program.graph.nodes if n.name == "input")
    return fake_mode, x


def _exprs(value: torch.Tensor) -> tuple[Any, ...]:
    def expr(size: Any) -> Any:
        return size if isinstance(size, int) else size.node.expr
    return (tuple(map(expr, value.shape)), tuple(map(expr, value.stride())),
            expr(value.storage_offset()), value.dtype)


class _Counted:
    """``target(*args)`` in the fake mode, counting the calls that reach the kernel."""

    def __init__(self, fake_mode: Any) -> None:
        self.fake_mode, self.calls = fake_mode, 0

    def __call__(self, outputs: FakeOutputs, target: Any, *args: Any) -> Any:
        def compute() -> Any:
            self.calls += 1
            with self.fake_mode:
                return target(*args)
        return outputs(target, args, {}, compute)


def test_a_repeat_on_equal_symbolic_sizes_is_made_without_the_kernel() -> None:
    fake_mode, x = _symbolic_input()
    outputs, run = FakeOutputs(fake_mode), _Counted(fake_mode)
    with fake_mode:
        y = torch.empty_like(x)
    first = run(outputs, aten.mul.Tensor, x, x)
    again = run(outputs, aten.mul.Tensor, y, y)
    assert run.calls == 1
    assert again is not first and _exprs(again) == _exprs(first)
    assert isinstance(again.shape[0], torch.SymInt)


def test_a_repeated_view_is_a_view_of_the_new_input_at_its_offset() -> None:
    fake_mode, x = _symbolic_input()
    outputs, run = FakeOutputs(fake_mode), _Counted(fake_mode)
    with fake_mode:
        base = torch.empty((2, x.shape[0], 8))
    first = run(outputs, aten.select.int, base, 0, 1)
    again = run(outputs, aten.select.int, base.clone(), 0, 1)
    assert run.calls == 1
    assert _exprs(again) == _exprs(first)
    assert again._is_view() and again.storage_offset() == base.shape[1] * 8


def test_a_view_that_changes_the_dtype_is_computed_each_time() -> None:
    fake_mode, x = _symbolic_input()
    outputs, run = FakeOutputs(fake_mode), _Counted(fake_mode)
    first = run(outputs, aten.view.dtype, x, torch.int32)
    again = run(outputs, aten.view.dtype, x, torch.int32)
    assert run.calls == 2 and first.dtype == again.dtype == torch.int32


@pytest.mark.parametrize("merged", [(0, 1), (1, 2), (0, 2)])
def test_a_contiguous_view_has_the_kernels_sizes_and_strides(merged: tuple[int, int]) -> None:
    """``view`` of a contiguous symbolic tensor is made as a strided view (the kernel's
    algorithm costs up to 0.2 s of sympy on a loop's sizes): its sizes and strides equal the
    kernel's at every size of the dim, and it is a view of its input."""
    fake_mode, x = _symbolic_input()
    first, last = merged
    with fake_mode:
        base = torch.empty((2, x.shape[0], 4))
        expected = base.flatten(first, last)
    made = FakeOutputs(fake_mode)(aten.view.default, (base, list(expected.shape)), {},
                                  lambda: pytest.fail("the view kernel ran"))
    symbol = x.shape[0].node.expr
    for rows in (2, 7, 64):
        assert _at(made.shape, symbol, rows) == _at(expected.shape, symbol, rows)
        assert _at(made.stride(), symbol, rows) == _at(expected.stride(), symbol, rows)
    assert made._is_view()


def _at(sizes: Any, symbol: Any, rows: int) -> list[int]:
    return [d if isinstance(d, int) else int(d.node.expr.subs(symbol, rows)) for d in sizes]


def test_a_loops_value_is_its_stacked_body_as_the_scan_kernel_makes_it() -> None:
    """The re-trace values a ``scan`` from its body's one trace: the stacked output equals
    what torch's own ``scan`` fake kernel (which traces the body again) gives."""
    seq = torch.export.Dim("seq", min=2, max=2 * S)
    prog = tp.compile(Stack(kv_heads=2).eval(), (torch.randint(0, 50, (1, 32)),),
                      dynamic_shapes=({1: seq},), chunks=4)
    program = prog.exported_program
    values = retrace(program)
    fake_mode, _ = program_shape_env(program)
    loops = [n for n in program.graph.nodes if n.target is torch.ops.higher_order.scan]
    assert len(loops) == 2
    for node in loops:
        args = torch.fx.node.map_arg(node.args, lambda n: values[n.name].value)
        body = getattr(program.graph_module, node.args[0].target)
        with fake_mode, enable_python_dispatcher(), torch.no_grad():
            expected = torch.ops.higher_order.scan(body, args[1], args[2], args[3])
        traced = values[node.name].value
        assert [_exprs(v) for v in traced] == [_exprs(v) for v in expected]
        assert f"{node.args[0].target}/{next(iter(body.graph.nodes)).name}" in values
