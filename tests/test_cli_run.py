"""``tensorplan run``: runs a target out of its arena and says whether it matches eager."""

from __future__ import annotations

import torch

import tensorplan as tp
from tensorplan.cli import main


def test_run_zoo_model_matches_eager(capsys):
    assert main(["run", "zoo:mlp", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "float32[8, 10]" in out
    assert "yes" in out and "none" in out


def test_run_saved_program_uses_its_example_inputs(tmp_path, capsys):
    prog = tp.compile(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    path = tmp_path / "linear.tplan"
    prog.save(path)
    assert main(["run", str(path), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "float32[2, 3]" in out and "64 B arena" in out  # 32 B input + 24 B output, aligned


def test_run_unknown_target_is_one_line_error(capsys):
    assert main(["run", "zoo:nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no built-in model 'nope'" in err
