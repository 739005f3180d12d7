"""``tensorplan run``: runs a target out of its arena and says whether it matches eager."""

from __future__ import annotations

import re

import pytest
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


FACTORIES = '''
import re

import pytest
import torch

calls = 0

def unseeded():
    global calls
    calls += 1
    return torch.nn.Linear(4, 3), (torch.randn(2, 4),)

def raises():
    raise RuntimeError("boom in factory")

def garbage():
    return 1, 2

def branchy():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x
    return Branchy(), (torch.randn(3),)
'''


def test_run_calls_a_factory_once_and_compares_that_model(tmp_path, monkeypatch, capsys):
    (tmp_path / "factories_once.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "factories_once:unseeded", "--runs", "2"]) == 0
    import factories_once

    assert factories_once.calls == 1
    assert "yes" in capsys.readouterr().out


@pytest.mark.parametrize("factory, message", [
    ("raises", "the factory raised RuntimeError: boom in factory"),
    ("garbage", r"the factory returned \(int, int\); expected a zoo.Example"),
    ("branchy", "capture: torch.export failed on Branchy"),
])
def test_factory_and_capture_failures_are_one_line_errors(tmp_path, monkeypatch, capsys, factory,
                                                          message):
    (tmp_path / "factories_bad.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    assert main(["run", f"factories_bad:{factory}"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("tensorplan run")]
    assert len(lines) == 1 and re.search(message, lines[0])


def test_run_says_its_threads_and_counts_fallbacks_per_run(capsys):
    """tiny_gpt's five layer norms run functionally once each per run, whatever the run count."""
    assert main(["run", "zoo:tiny_gpt", "--runs", "3", "--threads", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "medians of 3 runs on 1 thread;" in out
    assert "aten.native_layer_norm.default x5 " in out + " "
    assert torch.get_num_threads() == 1


def test_bench_says_its_threads(capsys):
    assert main(["bench", "zoo:mlp", "--runs", "2", "--algorithms", "greedy"]) == 0
    assert "medians of 2 runs on 1 thread" in capsys.readouterr().out


def test_a_thread_count_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        main(["run", "zoo:mlp", "--threads", "0"])
    assert "--threads" in capsys.readouterr().err


def test_run_of_a_dynamic_model_says_the_arena_at_its_example_sizes(capsys):
    assert main(["run", "zoo:tiny_gpt", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "run out of a 65,664 B arena at seq=32 (655,872 B at the upper bounds)" in out
