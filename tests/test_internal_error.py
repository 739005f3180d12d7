"""Our own bugs say so: an unexpected failure inside a stage is an ``InternalError`` naming the
stage, the node, its op and argument shapes, and what to report; user errors keep their types."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import tensorplan as tp
from tensorplan.cli import main
from tensorplan.internal import stage, versions
from tensorplan.runtime import graph
from tensorplan.schedule import concat, reuse
from tensorplan.specs import propagate as propagation

ADVICE = (f'please report it with the model (torch.export.save(ep, "model.pt2"), or the '
          f"tensorplan command and its target), {versions()} and the full traceback (the "
          "command line prints it with TENSORPLAN_DEBUG=1)")


class Concat(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.relu(), x.neg()], 1) * 2


class Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,)) + 1


class Chain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1


def test_failing_schedule_step_names_stage_node_op_shapes_and_advice(monkeypatch):
    bug = IndexError("list index out of range")

    def slices(node, specs, prefix):
        raise bug
    monkeypatch.setattr(concat, "_slices", slices)
    with pytest.raises(tp.InternalError) as info:
        tp.compile(Concat(), (torch.randn(1, 4, 7, 16),))
    error = info.value
    assert isinstance(error, tp.TensorPlanError)
    assert error.__cause__ is bug
    assert error.stage == "schedule"
    assert error.node == "cat: aten.cat.default([float32[1,4,7,16], float32[1,4,7,16]], 1)"
    assert error.summary.startswith("internal error in schedule (schedule/concat.py:")
    assert error.summary.endswith(
        ", _place): IndexError: list index out of range. This is a bug in tensorplan, not in "
        f"the model or its inputs: {ADVICE}")
    assert str(error) == f"{error.summary}\n  at node {error.node}"


def test_a_node_in_a_subgraph_is_named_with_its_submodule(monkeypatch):
    original = propagation.tensor_spec

    def tensor_spec(value, where, *args):
        if "aten.sin.default" in where:
            raise KeyError("sin")
        return original(value, where, *args)
    monkeypatch.setattr(propagation, "tensor_spec", tensor_spec)
    with pytest.raises(tp.InternalError) as info:
        tp.compile(Branches(), (torch.randn(3, 4),))
    assert info.value.stage == "propagate"
    assert info.value.node == "true_graph_0/sin: aten.sin.default(float32[3,4])"
    assert "(specs/propagate.py:" in info.value.summary and "KeyError: 'sin'" in info.value.summary
    assert isinstance(info.value.__cause__, KeyError)


def _failing_steps(monkeypatch, target: torch._ops.OpOverload, bug: Exception) -> None:
    """Every run step of ``target``'s nodes raises ``bug`` (the frame steps still work)."""
    original = graph.build_steps

    def fail(env, bindings):
        raise bug

    def build_steps(node, row, ctx):
        built = original(node, row, ctx)
        if node.target is not target:
            return built
        return [(step, True) if per_frame else (fail, False) for step, per_frame in built]
    monkeypatch.setattr(graph, "build_steps", build_steps)


@pytest.mark.parametrize(("model", "node"), [
    (Chain(), "sin: aten.sin.default(float32[3,4])"),
    (Branches(), "true_graph_0/sin: aten.sin.default(float32[3,4])"),
])
def test_a_step_failing_at_run_time_names_the_node(monkeypatch, model, node):
    prog = tp.compile(model, (torch.ones(3, 4),))
    bug = RuntimeError("kernel failed")
    _failing_steps(monkeypatch, torch.ops.aten.sin.default, bug)
    with pytest.raises(tp.InternalError) as info:
        prog.runner().run(torch.ones(3, 4))
    assert info.value.stage == "run"
    assert info.value.node == node
    assert info.value.__cause__ is bug
    assert info.value.summary.startswith("internal error in run (")
    assert info.value.summary.endswith(
        "RuntimeError: kernel failed. This is a bug in tensorplan unless the model itself fails "
        f"on these inputs in eager: {ADVICE}")


@pytest.mark.parametrize(("model", "node"), [
    (Chain(), "sin: aten.sin.default(float32[3,4])"),
    (Branches(), "true_graph_0/sin: aten.sin.default(float32[3,4])"),
])
def test_a_failing_lowering_is_an_internal_error(monkeypatch, model, node):
    prog = tp.compile(model, (torch.ones(3, 4),))
    original = graph.build_steps

    def build_steps(node, row, ctx):
        assert node.target is not torch.ops.aten.sin.default, "no builder"
        return original(node, row, ctx)
    monkeypatch.setattr(graph, "build_steps", build_steps)
    with pytest.raises(tp.InternalError) as info:
        prog.runner()
    assert info.value.stage == "runtime lowering"
    assert info.value.node == node
    assert isinstance(info.value.__cause__, AssertionError)
    assert "AssertionError: no builder" in info.value.summary


def test_input_errors_keep_their_type_at_run_time():
    prog = tp.compile(Chain(), (torch.ones(3, 4),))
    with pytest.raises(tp.InputError) as info:
        prog.run(torch.ones(3, 5))
    assert type(info.value) is tp.InputError


def test_unbounded_shapes_keep_their_type():
    with pytest.raises(tp.UnboundedShapeError) as info:
        tp.compile(Chain(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch", min=2)},))
    assert type(info.value) is tp.UnboundedShapeError


def test_an_arena_over_budget_keeps_its_type():
    with pytest.raises(tp.PlanError, match="32 B over the budget of 16 B") as info:
        tp.compile(Chain(), (torch.ones(3, 4),), max_arena_bytes=16)
    assert type(info.value) is tp.PlanError


def test_export_failures_stay_capture_errors():
    class Broken(torch.nn.Module):
        def forward(self, x):
            return x[10]
    with pytest.raises(tp.CaptureError) as info:
        tp.compile(Broken(), (torch.ones(3),))
    assert type(info.value) is tp.CaptureError


def test_keyboard_interrupt_passes_through(monkeypatch):
    def slices(node, specs, prefix):
        raise KeyboardInterrupt
    monkeypatch.setattr(concat, "_slices", slices)
    with pytest.raises(KeyboardInterrupt):
        tp.compile(Concat(), (torch.randn(1, 4, 7, 16),))


def test_nested_stages_wrap_once_and_the_inner_names_it():
    bug = ValueError("bad")
    with pytest.raises(tp.InternalError) as info, stage("outer"), stage("inner"):
        raise bug
    assert info.value.stage == "inner"
    assert info.value.__cause__ is bug
    assert info.value.node is None


def _fail_at_gelu(monkeypatch) -> None:
    original = reuse._candidate

    def candidate(walk, node, *args):
        if node.target is torch.ops.aten.gelu.default:
            raise IndexError("tuple index out of range")
        return original(walk, node, *args)
    monkeypatch.setattr(reuse, "_candidate", candidate)


def test_cli_prints_one_line_and_the_node_with_exit_code_3(monkeypatch, capsys):
    _fail_at_gelu(monkeypatch)
    monkeypatch.delenv("TENSORPLAN_DEBUG", raising=False)
    assert main(["plan", "zoo:mlp"]) == 3
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("tensorplan plan: internal error in schedule (schedule/reuse.py:")
    assert lines[0].endswith(f"IndexError: tuple index out of range. This is a bug in "
                             f"tensorplan, not in the model or its inputs: {ADVICE}")
    assert lines[1] == "  at node gelu: aten.gelu.default(float32[8,256])"
    assert captured.out == ""


def test_cli_prints_the_traceback_with_tensorplan_debug(monkeypatch, capsys):
    _fail_at_gelu(monkeypatch)
    monkeypatch.setenv("TENSORPLAN_DEBUG", "1")
    assert main(["plan", "zoo:mlp"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "IndexError: tuple index out of range" in err
    assert "The above exception was the direct cause of the following exception" in err
    assert err.splitlines()[-1] == "  at node gelu: aten.gelu.default(float32[8,256])"
