"""A new user's own model: a factory in a file of theirs that imports timm or transformers,
loaded by the command line by its path, and a script that imports tensorplan first (issue 32).

Each runs in a fresh interpreter: the torchvision fix is an import hook that only the first
``import torchvision`` of a process goes through.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# found, not imported: a plain `import timm` here is what the hook under test makes work
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("timm", "transformers")),
    reason="the [vision] and [models] extras are not installed")

MODELS = textwrap.dedent('''
    import timm
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM


    def cnn():
        model = timm.create_model("resnet10t", pretrained=False, num_classes=4).eval()
        return model, (torch.randn(1, 3, 32, 32),)


    def llama():
        config = LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                             num_attention_heads=4, num_key_value_heads=2, vocab_size=50,
                             use_cache=False)
        return LlamaForCausalLM(config).eval(), (torch.randint(0, 50, (1, 8)),)
''')


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


def _write_package(root: Path) -> Path:
    package = root / "mypkg"
    package.mkdir()
    (package / "models.py").write_text(MODELS)
    return package / "models.py"


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["cnn", "llama"])
def test_plan_loads_a_factory_from_a_file_that_imports_timm_and_transformers(
        tmp_path, factory) -> None:
    models = _write_package(tmp_path)
    cli = str(Path(sys.executable).with_name("tensorplan"))
    done = _run(cli, "plan", f"mypkg/models.py:{factory}", "--json", "plan.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "plan.json").stat().st_size > 0
    assert models.exists()


def test_a_factory_file_that_is_missing_is_named_in_the_error(tmp_path) -> None:
    cli = str(Path(sys.executable).with_name("tensorplan"))
    done = _run(cli, "plan", "nothere/models.py:f", cwd=tmp_path)
    assert done.returncode != 0
    assert "no such file 'nothere/models.py'" in done.stderr
    assert "path/to/file.py:factory" in done.stderr


def test_a_script_that_imports_tensorplan_first_can_import_timm(tmp_path) -> None:
    script = ("import tensorplan, timm, torch\n"
              "model = timm.create_model('resnet10t', pretrained=False, num_classes=4).eval()\n"
              "prog = tensorplan.compile(model, (torch.randn(1, 3, 32, 32),))\n"
              "print(prog.plan.arena_bytes > 0)\n")
    done = _run(sys.executable, "-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
