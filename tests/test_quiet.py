"""Quiet: tensorplan's own code warns of nothing, and the command line drops third-party noise
unless ``TENSORPLAN_DEBUG=1``."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import torch

import tensorplan as tp
from tensorplan import zoo

SOURCE = Path(tp.__file__).resolve().parent


def test_compiling_and_running_warns_of_nothing_from_tensorplan():
    example = zoo.example("tiny_gpt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
        out = prog.run(*example.args)
        prog.run(torch.randint(0, 256, (1, 7)))
    ours = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught
            if Path(w.filename).resolve().is_relative_to(SOURCE)]
    assert ours == []
    torch.testing.assert_close(out, example.model(*example.args))


WARNING_MODEL = """
import warnings

import torch


class Noisy(torch.nn.Module):
    def forward(self, x):
        warnings.warn("a third-party deprecation", FutureWarning)
        return x.relu()


def make():
    return Noisy(), (torch.randn(4),)
"""


def _plan(debug: bool, folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENSORPLAN_DEBUG="1" if debug else "0", PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-m", "tensorplan", "plan", "noisy.py:make"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=folder)


def test_the_command_line_prints_no_third_party_warning_unless_debugging(tmp_path):
    """A model's own warning (a package it imports, deprecating something) is third-party."""
    (tmp_path / "noisy.py").write_text(WARNING_MODEL)
    quiet, debug = _plan(False, tmp_path), _plan(True, tmp_path)
    assert (quiet.returncode, debug.returncode) == (0, 0)
    assert quiet.stderr == ""
    assert "FutureWarning" in debug.stderr
    assert quiet.stdout == debug.stdout


def test_a_command_help_is_its_own_not_the_tool_examples():
    from tensorplan.cli.main import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    for name in ("plan", "run", "dsa", "bench", "diff", "pte"):
        text = commands[name].format_help()
        assert text.startswith(f"usage: tensorplan {name} ")
        assert "built-in models:" not in text and "tensorplan run zoo:tiny_gpt run out" not in text


def _treespec_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "LeafSpec" in str(w.message)]


def test_compiling_saving_and_loading_show_no_treespec_deprecation(tmp_path):
    """torch 2.13 warns ``isinstance(treespec, LeafSpec)`` is deprecated while it copies a
    program's tree specs (run_decompositions, its serializer): torch's own, not the user's."""
    path = tmp_path / "linear.tplan"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.compile(torch.nn.Linear(4, 3), (torch.randn(2, 4),)).save(path)
        tp.load(path)
    assert _treespec_warnings(caught) == []


def test_the_treespec_deprecation_alone_is_silenced_around_torch_export_save_and_load(
        tmp_path, monkeypatch):
    def warning(call):
        def warned(*args, **kwargs):
            warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use ...",
                          FutureWarning, stacklevel=2)
            warnings.warn(f"another warning of {call.__name__}", FutureWarning, stacklevel=2)
            return call(*args, **kwargs)
        return warned

    prog = tp.compile(torch.nn.Linear(4, 3), (torch.randn(2, 4),))
    monkeypatch.setattr(torch.export, "save", warning(torch.export.save))
    monkeypatch.setattr(torch.export, "load", warning(torch.export.load))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog.save(tmp_path / "linear.tplan")
        tp.load(tmp_path / "linear.tplan")
    assert _treespec_warnings(caught) == []
    assert [str(w.message) for w in caught if "another warning" in str(w.message)] == [
        "another warning of save", "another warning of load"]
