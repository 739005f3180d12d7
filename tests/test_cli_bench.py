"""``tensorplan bench``: several planners over models and CSV instances, measured side by side."""

from __future__ import annotations

import json
from pathlib import Path

from tensorplan.cli import main

STAIRS = "id,lower,upper,size\n10,0,2,4\n11,1,3,4\n12,2,4,8\n"

COUNTER = '''
import torch

class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        return x * self.count

def make():
    return Counter(), (torch.ones(3),)
'''


def test_bench_plans_a_model_and_an_instance_with_each_algorithm(tmp_path: Path, capsys):
    instance = tmp_path / "stairs.csv"
    instance.write_text(STAIRS)
    out = tmp_path / "rows.json"
    argv = ["bench", "zoo:mlp", str(instance), "--algorithms", "naive,greedy", "--runs", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["target"], r["algorithm"]) for r in rows] == [
        ("mlp", "naive"),
        ("mlp", "greedy"),
        ("stairs", "naive"),
        ("stairs", "greedy"),
    ]
    mlp_naive, mlp_greedy, stairs_naive, stairs_greedy = rows
    # mlp: input 2,048 B, one hidden activation of 8,192 B (gelu writes over addmm), output
    # 320 B (aligned to 16): the input and the hidden activation are live together
    assert mlp_greedy["arena_bytes"] == mlp_greedy["lower_bound_bytes"] == 10_240
    assert mlp_naive["arena_bytes"] > mlp_greedy["arena_bytes"]
    assert mlp_greedy["matches"] is True and mlp_greedy["run_ms"] > 0
    assert (stairs_naive["arena_bytes"], stairs_greedy["arena_bytes"]) == (16, 12)
    assert stairs_greedy["optimal"] is True and stairs_greedy["run_ms"] is None
    assert "stairs" in capsys.readouterr().out


def test_bench_stateful_model_matches_eager_under_every_algorithm(tmp_path: Path, monkeypatch):
    (tmp_path / "counter_model.py").write_text(COUNTER)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "rows.json"
    argv = ["bench", "counter_model:make", "--algorithms", "greedy,naive", "--runs", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    # each program starts from the buffer's value when it first runs: the exported program
    # shares the module's buffer, which eager calls have advanced by then, so both agree
    assert [row["matches"] for row in json.loads(out.read_text())] == [True, True]


def test_bench_unknown_algorithm_is_one_line_error(capsys):
    assert main(["bench", "zoo:mlp", "--algorithms", "greedy,fastest"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown algorithm(s) fastest" in err


def test_bench_runs_a_saved_program_on_its_example_inputs(tmp_path: Path):
    import torch

    exported = torch.export.export(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    path = tmp_path / "linear.pt2"
    torch.export.save(exported, path)
    out = tmp_path / "rows.json"
    argv = ["bench", str(path), "--algorithms", "naive,greedy", "--runs", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    # input 32 B and output 24 B, each aligned to 16: both live at once, 64 B with any planner
    assert [(r["target"], r["arena_bytes"], r["matches"]) for r in rows] == [
        ("linear", 64, None),
        ("linear", 64, None),
    ]
    assert all(r["run_ms"] > 0 and r["eager_ms"] is None for r in rows)


def test_bench_missing_file_is_one_line_error(tmp_path: Path, capsys):
    assert main(["bench", str(tmp_path / "nope.pt2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
