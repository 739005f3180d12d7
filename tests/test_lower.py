"""Lowering: how every node runs, as a table a test (and ``tensorplan run --explain``) reads."""

from __future__ import annotations

import subprocess
import sys

import torch
from shared_models import Branches

import tensorplan as tp
from tensorplan import zoo
from tensorplan.runtime.lower import Kind, explain


class Small(torch.nn.Module):
    """A counter buffer bumped in place, conv -> relu -> flatten -> linear -> clone, and a
    data-dependent nonzero."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.fc = torch.nn.Linear(2 * 4 * 4, 3)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        y = self.fc(self.conv(x).relu().flatten(1)).clone()
        return y, (y > 0).nonzero()


def rows(prog: tp.Program) -> list[tuple[str, str, str, bool]]:
    return [(r.name, r.target, r.kind.value, r.per_frame) for r in prog.lowering()]


def test_lowering_table_of_a_small_model_names_how_every_node_runs():
    torch.manual_seed(0)
    model, x = Small(), torch.randn(2, 1, 4, 4)
    eager = Small()
    eager.load_state_dict(model.state_dict())
    prog = tp.compile(model, (x,))
    table = rows(prog)
    assert table[:16] == [
        ("p_conv_weight", "placeholder", "constant", True),
        ("p_conv_bias", "placeholder", "constant", True),
        ("p_fc_weight", "placeholder", "constant", True),
        ("p_fc_bias", "placeholder", "constant", True),
        ("b_count", "placeholder", "state", True),
        ("x", "placeholder", "input", True),
        ("add", "aten.add.Tensor", "in-place", False),      # the new count, in its buffer
        ("convolution", "aten.convolution.default", "fallback", False),
        ("relu", "aten.relu.default", "in-place", False),   # over the dying convolution
        ("view", "aten.view.default", "view", True),        # a view of the planned relu
        ("permute", "aten.permute.default", "view", True),
        ("addmm", "aten.addmm.default", "out", False),
        ("clone", "aten.clone.default", "native", False),
        ("gt", "aten.gt.Scalar", "out", False),
        ("nonzero", "aten.nonzero.default", "data-dependent", False),
        ("sym_size_int_1", "aten.sym_size.int", "sizes", False),
    ]
    assert table[-1] == ("output", "output", "output", False)
    assert {kind for _, _, kind, _ in table[16:-1]} == {"sizes", "plain"}  # range asserts
    eager_y, eager_nz = eager(x)
    y, nz = prog.run(x)
    torch.testing.assert_close(y, eager_y)
    assert torch.equal(nz, eager_nz)
    assert prog.stats == {"aten.convolution.default": 1, "aten.nonzero.default": 1}
    assert prog.state_dict()["count"].item() == 1.0


def test_subgraph_rows_follow_the_top_level_graph():
    prog = tp.compile(Branches(), (torch.randn(4), torch.randn(2)))
    table = rows(prog)
    assert ("cond", "cond", "control-flow", False) in table
    assert ("true_graph_0", "get_attr", "subgraph", True) in table
    assert [r for r in table if r[0].startswith("false_graph_0/")] == [
        ("false_graph_0/x", "placeholder", "subgraph input", False),
        ("false_graph_0/neg", "aten.neg.default", "out", False),
        ("false_graph_0/output", "output", "output", False),
    ]
    assert [r.kind for r in prog.lowering()].count(Kind.CONTROL_FLOW) == 1


def test_run_explain_prints_the_lowering_table():
    example = zoo.example("mlp")
    prog = tp.compile(example.model, example.args)
    done = subprocess.run([sys.executable, "-m", "tensorplan", "run", "zoo:mlp", "--explain",
                           "--runs", "1"], capture_output=True, text=True, check=True)
    table = explain(prog.lowering())
    assert done.stdout.startswith(table + "\n")
    assert "addmm_1       aten.addmm.default    out             every run" in table
