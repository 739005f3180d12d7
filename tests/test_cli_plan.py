"""``tensorplan plan TARGET``: targets, printed tables, written files, and one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import tensorplan as tp
from tensorplan import zoo
from tensorplan.cli import main

FACTORIES = textwrap.dedent("""
    import torch
    from tensorplan import zoo

    class Chain(torch.nn.Module):
        def forward(self, x):
            return x.relu().neg()

    def pair():
        return Chain(), (torch.randn(4),)

    def example():
        return zoo.Example(Chain(), (torch.randn(2, 8),))

    def wrong():
        return 42
""")


@pytest.fixture(scope="module")
def mlp_arena() -> int:
    e = zoo.example("mlp")
    return tp.compile(e.model, e.args).plan.arena_bytes


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    yield "my_models"
    sys.modules.pop("my_models", None)


def _field(out: str, name: str) -> str:
    """The value cell of one row of the plan overview table."""
    match = re.search(rf"│ {name} +│ +(.+?) │", out)
    assert match, out
    return match.group(1)


def test_zoo_target_prints_the_plan_only(capsys, mlp_arena):
    assert main(["plan", "zoo:mlp"]) == 0
    out = capsys.readouterr().out
    assert "Tensor specs" not in out
    assert _field(out, "arena") == "10,240 B (10.0 KiB)" == f"{mlp_arena:,} B (10.0 KiB)"
    assert _field(out, "storages") == "3 (2 activation, 1 input)"  # gelu writes over addmm
    assert _field(out, "baseline bound") == "16,384 B (16.0 KiB) (arena 0.62x)"
    assert "Largest 3 of 3 storages" in out


def test_specs_flag_prints_the_spec_table_first(capsys):
    assert main(["plan", "zoo:mlp", "--specs"]) == 0
    out = capsys.readouterr().out
    assert out.index("Tensor specs") < out.index("Memory plan")
    assert re.search(r"│ addmm_1 +│ \[8, 10\] +│ float32 │ \(0, 1\) +│ +320 B │ +3 │", out)


def test_demo_prints_symbolic_specs_then_the_plan(capsys):
    assert main(["plan", "zoo:tiny_gpt", "--specs"]) == 0
    out = capsys.readouterr().out
    assert out.index("Tensor specs") < out.index("Memory plan")
    assert re.search(r"│ tokens +│ \[1, seq<=128\] +│ int64 ", out)
    assert _field(out, "alignment") == "16 B"


def test_algorithm_and_alignment_options(capsys):
    assert main(["plan", "zoo:mlp", "--algorithm", "naive", "--alignment", "64"]) == 0
    out = capsys.readouterr().out
    assert _field(out, "algorithm") == "naive"
    assert _field(out, "alignment") == "64 B"


def test_top_prints_that_many_storages_with_their_banks_and_sums_the_rest(tmp_path, capsys):
    saved = tmp_path / "plan.json"
    assert main(["plan", "zoo:tiny_gpt", "--top", "3", "--bank", "sram=128KiB", "--bank",
                 "dram", "--json", str(saved)]) == 0
    out = capsys.readouterr().out
    storages = sorted(json.loads(saved.read_text())["storages"],
                      key=lambda s: (-s["size"], s["id"]))
    table = out.split(f"Largest 3 of {len(storages)} storages")[1].split("└")[0]
    rows = [[cell.strip() for cell in line.strip("│").split("│")]
            for line in table.splitlines() if line.startswith("│")]
    assert [row[:3] for row in rows] == [[str(s["id"]), s["bank"], f"{s['offset']:,}"]
                                         for s in storages[:3]]
    assert {s["bank"] for s in storages} == {"sram", "dram"}
    rest = sum(s["size"] for s in storages[3:])
    assert re.search(rf"and {len(storages) - 3} more storages, {rest:,} B \(.*\) in all", out)


def test_output_files(tmp_path, capsys, mlp_arena):
    files = {flag: tmp_path / name for flag, name in (
        ("--json", "plan.json"), ("--header", "plan.h"), ("--timeline", "plan.png"),
        ("--save", "mlp.tpz"))}
    argv = ["plan", "zoo:mlp"] + [str(x) for pair in files.items() for x in pair]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == [f"wrote plan JSON to {files['--json']}",
                          f"wrote C header to {files['--header']}",
                          f"wrote timeline to {files['--timeline']}",
                          f"wrote program to {files['--save']}"]
    document = json.loads(files["--json"].read_text())
    assert document["arena_bytes"] == mlp_arena and document["model"]["name"] == "mlp"
    assert f"#define MLP_ARENA_BYTES {mlp_arena}u" in files["--header"].read_text()
    assert files["--timeline"].read_bytes()[:4] == b"\x89PNG"
    assert tp.load(files["--save"]).plan.arena_bytes == mlp_arena


def test_saved_program_target_keeps_its_plan_unless_asked(tmp_path, capsys):
    saved = tmp_path / "mlp.pt2"
    assert main(["plan", "zoo:mlp", "--algorithm", "naive", "--save", str(saved)]) == 0
    naive = _field(capsys.readouterr().out, "arena")
    assert main(["plan", str(saved)]) == 0
    out = capsys.readouterr().out
    assert (_field(out, "algorithm"), _field(out, "arena")) == ("naive", naive)
    assert main(["plan", str(saved), "--algorithm", "greedy"]) == 0
    assert _field(capsys.readouterr().out, "algorithm") == "greedy"


def test_torch_export_file_target(tmp_path, capsys):
    path = tmp_path / "linear.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)), path)
    assert main(["plan", str(path)]) == 0
    assert _field(capsys.readouterr().out, "arena") == "80 B"


def test_factory_targets(factories, capsys):
    assert main(["plan", f"{factories}:pair"]) == 0  # x -> relu -> neg in one storage
    assert _field(capsys.readouterr().out, "arena") == "16 B"
    assert main(["plan", f"{factories}:example"]) == 0
    assert _field(capsys.readouterr().out, "arena") == "64 B"
    assert main(["plan", f"{factories}:example", "--no-reuse"]) == 0
    assert _field(capsys.readouterr().out, "arena") == "128 B"


@pytest.mark.parametrize(("target", "message"), [
    ("zoo:nope", "zoo: no built-in model 'nope'; choose one of "),
    ("zoo:tiny-gpt", "zoo: no built-in model 'tiny-gpt'; did you mean tiny_gpt? choose one of "),
    ("missing.pt2", "target 'missing.pt2': no such file"),
    ("just-a-word", "target 'just-a-word': expected zoo:NAME, package.module:factory, "
                    "path/to/file.py:factory, a .pt2 file (torch.export.save), or a program "
                    "saved with --save (.tplan)"),
    ("no_such_module_xyz:make", "target 'no_such_module_xyz:make': cannot import "
                                "'no_such_module_xyz'"),
    ("my_models:absent", "target 'my_models:absent': module 'my_models' has no callable "
                         "'absent'"),
    ("my_models:wrong", "target 'my_models:wrong': the factory returned int; expected a "
                        "zoo.Example"),
])
def test_bad_targets_exit_2_with_one_line(factories, capsys, target, message):
    assert main(["plan", target]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"tensorplan plan: error: {message}")
    assert captured.err.count("\n") == 1


def test_corrupted_program_file_exits_2(tmp_path, capsys):
    saved = tmp_path / "mlp.tpz"
    assert main(["plan", "zoo:mlp", "--save", str(saved)]) == 0
    capsys.readouterr()
    with zipfile.ZipFile(saved) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(saved, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, b"[]" if name == "plan.json" else data)
    assert main(["plan", str(saved)]) == 2
    assert capsys.readouterr().err == (f"tensorplan plan: error: {saved}: plan.json: expected a "
                                       "JSON object, got list\n")


def test_unwritable_output_exits_2(tmp_path, capsys):
    target = tmp_path / "no" / "such" / "dir" / "plan.json"
    assert main(["plan", "zoo:mlp", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert err == f"tensorplan plan: error: cannot write {target}: No such file or directory\n"


def test_alignment_must_be_positive(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["plan", "zoo:mlp", "--alignment", "0"])
    assert stop.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


def test_python_m_tensorplan_prints_no_traceback():
    result = subprocess.run([sys.executable, "-m", "tensorplan", "plan", "zoo:nope"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("tensorplan plan: error: zoo: no built-in model 'nope'")
    assert "Traceback" not in result.stderr


def test_unknown_timeline_format_is_one_line_error(tmp_path, capsys):
    assert main(["plan", "zoo:mlp", "--timeline", str(tmp_path / "t.xyz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err and "xyz" in err


def test_chunks_flag_prints_the_counts_tried_and_what_stays_whole(capsys):
    """``tiny_gpt`` (its seq a plain dynamic dim: its regions run as loops) and
    ``zoo:hf_gpt2`` at 4 chunks plan below the program as exported (the counts table marks
    it kept)."""
    for target in ("zoo:tiny_gpt", "zoo:hf_gpt2"):
        assert main(["plan", target, "--chunks", "4"]) == 0
        out = capsys.readouterr().out
        kept = next(line for line in out.splitlines() if line.strip("│ ").startswith("4 "))
        assert "yes" in kept
    assert "largest values left whole" in out and "an output of the program" in out


@pytest.mark.parametrize("bad", ["0", "two", "-3"])
def test_chunks_flag_refuses_what_is_not_auto_or_a_count(capsys, bad):
    with pytest.raises(SystemExit) as error:
        main(["plan", "zoo:mlp", "--chunks", bad])
    assert error.value.code == 2
    assert "expected auto or a positive number of chunks" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "data", "said"), [
    ("plan.json", b'{"arena_bytes": 1}', "is not a torch.export program but a JSON file"),
    ("model.pte", b"<\x00\x00\x00ET12eh00" + bytes(64),
     "is not a torch.export program but an ExecuTorch program (.pte)"),
])
def test_a_json_or_pte_given_to_plan_is_named_for_what_it_is(tmp_path, capsys, name, data,
                                                             said):
    path = tmp_path / name
    path.write_bytes(data)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert said in err and "re-save" not in err


PTE = b"<\x00\x00\x00ET12eh00" + bytes(64)  # the head of an ExecuTorch program


@pytest.mark.parametrize("command", ["plan", "run", "pte"])
def test_a_pte_target_is_refused_naming_the_command_given(tmp_path, capsys, command):
    path = tmp_path / "conv.pte"
    path.write_bytes(PTE)
    output = ["-o", str(tmp_path / "out.pte")] if command == "pte" else []
    assert main([command, str(path), *output]) == 2
    err = capsys.readouterr().err
    assert err == (f"tensorplan {command}: error: target '{path}' is not a torch.export program "
                   "but an ExecuTorch program (.pte): it runs in ExecuTorch's runtime; give "
                   f"tensorplan {command} the model or the .pt2 it was lowered from\n")


def test_a_python_file_without_factory_names_its_functions(tmp_path, monkeypatch, capsys):
    (tmp_path / "mymodel.py").write_text("import torch\n\ndef make():\n    pass\n\n"
                                          "def _helper():\n    pass\n\nclass Net:\n    pass\n\n"
                                          "def build(n):\n    return n\n")
    monkeypatch.chdir(tmp_path)
    assert main(["plan", "mymodel.py"]) == 2
    assert capsys.readouterr().err == (
        "tensorplan plan: error: target 'mymodel.py' is a Python file: name the function in it "
        "that returns the model and its example inputs, as mymodel.py:FUNCTION (its top-level "
        "functions: make, build)\n")


def test_a_python_file_that_does_not_parse_is_still_named_a_python_file(tmp_path, capsys):
    path = tmp_path / "broken.py"
    path.write_text("def (:\n")
    assert main(["plan", str(path)]) == 2
    assert capsys.readouterr().err.endswith(f"as {path}:FUNCTION\n")


@pytest.mark.parametrize("command", ["plan", "run", "pte"])
def test_target_help_lists_every_form(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("zoo:NAME, package.module:factory, path/to/file.py:factory, a .pt2 file "
            "(torch.export.save), or a program saved with --save (.tplan)") in help_text


def test_top_level_help_lists_the_file_factory_target(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("A TARGET is zoo:NAME, package.module:factory, path/to/file.py:factory, a .pt2 "
            "file (torch.export.save), or a program saved with --save (.tplan).") in help_text
