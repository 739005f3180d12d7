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


def _plan(debug: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENSORPLAN_DEBUG="1" if debug else "0", PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-m", "tensorplan", "plan", "zoo:mlp"], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_command_line_prints_no_third_party_warning_unless_debugging():
    """torch.export's decompositions warn of a pytree deprecation on every capture (torch 2.13)."""
    quiet, debug = _plan(False), _plan(True)
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
