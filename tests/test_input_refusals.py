"""A check of the model's own that the data fails, or a kernel refusing the values of the
user's inputs (an index out of range), both of which eager PyTorch refuses too, is the user's
``InputError``, naming the node, the op, the value and the valid range; any other failure of a
step stays our ``InternalError``."""

from __future__ import annotations

import pytest
import torch

import tensorplan as tp
from tensorplan import zoo
from tensorplan.cli import main
from tensorplan.runtime import graph


class Lookup(torch.nn.Module):
    """A 10x4 table indexed by the input ``i`` as ``kind`` says."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.table = kind, torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, i: torch.Tensor) -> torch.Tensor:
        t = self.table * 2
        if self.kind == "index_select":
            return torch.index_select(t, 0, i) + 1
        if self.kind == "gather":
            return torch.gather(t, 1, i.view(-1, 1).expand(-1, 2)) + 1
        if self.kind == "rows":
            return t[i] + 1
        if self.kind == "columns":
            return t[:, i] + 1
        return torch.cond(i.sum() > 0, lambda x: torch.index_select(self.table, 0, x),
                          lambda x: self.table[:2] * 0, (i,))


def test_an_out_of_vocabulary_token_is_an_input_error_naming_node_op_value_and_range():
    example = zoo.example("tiny_gpt")
    prog = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
    tokens = example.args[0].clone()
    tokens[0, 3] = 300  # the embedding has 256 rows
    with pytest.raises(tp.InputError) as info:
        prog.run(tokens)
    assert type(info.value) is tp.InputError
    assert isinstance(info.value.__cause__, IndexError)
    assert str(info.value) == (
        "run: node 'embedding' (aten.embedding.default) refuses the values of its indices "
        "(the input 'tokens'): 300 is outside the valid range [0, 255] of dim 0 of weight "
        "(size 256), and eager PyTorch refuses it too (IndexError: index out of range in "
        "self); pass values in [0, 255]")
    with pytest.raises(IndexError):
        example.model(tokens)
    tokens[0, 3] = 255  # the runner is usable again, and right
    torch.testing.assert_close(prog.run(tokens), example.model(tokens))


@pytest.mark.parametrize(("kind", "bad", "node", "argument", "dim", "size"), [
    ("index_select", 10, "'index_select' (aten.index_select.default)", "index (the input 'i')",
     0, 10),
    ("gather", 4, "'gather' (aten.gather.default)", "index", 1, 4),
    ("rows", 12, "'index' (aten.index.Tensor)", "indices[0] (the input 'i')", 0, 10),
    ("rows", -11, "'index' (aten.index.Tensor)", "indices[0] (the input 'i')", 0, 10),
    ("columns", 4, "'index' (aten.index.Tensor)", "indices[1] (the input 'i')", 1, 4),
    ("cond", 10, "'true_graph_0/index_select' (aten.index_select.default)", "index", 0, 10),
])
def test_every_indexing_op_refusing_its_index_is_an_input_error(kind, bad, node, argument, dim,
                                                               size):
    prog = tp.compile(Lookup(kind).eval(), (torch.tensor([1, 2]),))
    with pytest.raises(tp.InputError) as info:
        prog.run(torch.tensor([0, bad]))
    message = str(info.value)
    assert message.startswith(f"run: node {node} refuses the values of its {argument}: {bad} "
                              f"is outside the valid range [0, {size - 1}] of dim {dim} of ")
    assert f"(size {size}), and eager PyTorch refuses it too (" in message
    assert message.endswith(f"; pass values in [0, {size - 1}]")


def _failing_index_steps(monkeypatch, bug: Exception) -> None:
    """Every run step of ``aten.index.Tensor`` raises ``bug`` (as a wrong kernel would)."""
    original = graph.build_steps

    def fail(env, bindings):
        raise bug

    def build_steps(node, row, ctx):
        built = original(node, row, ctx)
        if node.target is not torch.ops.aten.index.Tensor:
            return built
        return [(step, True) if per_frame else (fail, False) for step, per_frame in built]
    monkeypatch.setattr(graph, "build_steps", build_steps)


def test_an_index_eager_takes_is_never_blamed_on_the_user(monkeypatch):
    """-1 is outside [0, 10) but ``index.Tensor`` takes it: a failure there is ours."""
    prog = tp.compile(Lookup("rows").eval(), (torch.tensor([1, 2]),))
    bug = IndexError("index out of range in our kernel")
    _failing_index_steps(monkeypatch, bug)
    with pytest.raises(tp.InternalError) as info:
        prog.runner().run(torch.tensor([0, -1]))
    assert info.value.__cause__ is bug
    assert info.value.node.startswith("index: aten.index.Tensor(")


def test_a_failure_with_every_index_in_range_is_ours(monkeypatch):
    prog = tp.compile(Lookup("rows").eval(), (torch.tensor([1, 2]),))
    _failing_index_steps(monkeypatch, RuntimeError("kernel failed"))
    with pytest.raises(tp.InternalError, match="RuntimeError: kernel failed"):
        prog.runner().run(torch.tensor([0, 9]))


FACTORY = '''
import torch
from tensorplan.zoo.models import TinyGPT


def out_of_vocabulary():
    return TinyGPT().eval(), (torch.tensor([[1, 2, 300, 4]]),)
'''


def test_cli_run_refuses_example_inputs_out_of_range_in_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "factories_vocabulary.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "factories_vocabulary:out_of_vocabulary", "--runs", "1"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert lines == [
        "tensorplan run: error: run: node 'embedding' (aten.embedding.default) refuses the "
        "values of its indices (the input 'tokens'): 300 is outside the valid range [0, 255] of "
        "dim 0 of weight (size 256), and eager PyTorch refuses it too (IndexError: index out "
        "of range in self); pass values in [0, 255]"]


class BoundedPadded(torch.nn.Module):
    """Pads ``x`` with as many zeros as ``n`` holds, at most 16 (the model's own check)."""

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        extra = n.item()
        torch._check(extra <= 16)
        return torch.cat([x, torch.zeros(extra)])


def test_a_check_of_the_model_that_the_data_fails_is_an_input_error():
    """``n`` = 20 fails the model's ``torch._check(extra <= 16)`` in eager too: the user's
    ``InputError`` naming the node and the check (it was our ``InternalError``)."""
    prog = tp.compile(BoundedPadded(), (torch.randn(4), torch.tensor(3)))
    assert prog.run(torch.randn(4), torch.tensor(16)).shape == (20,)
    with pytest.raises(RuntimeError):
        BoundedPadded()(torch.randn(4), torch.tensor(20))
    with pytest.raises(tp.InputError, match=r"node '_assert_scalar_default_1' \(aten\."
                       r"_assert_scalar.default\) fails on these inputs: Runtime assertion "
                       r"failed for expression u0 <= 16") as info:
        prog.run(torch.randn(4), torch.tensor(20))
    assert "export with a larger bound" in str(info.value)
