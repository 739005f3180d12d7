"""The report commands through the real entry point (``python -m tensorplan`` in a subprocess):
``--help``, ``--version``, ``plan --html/--timeline/--header``, ``dsa --html`` and ``diff``."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

import tensorplan as tp
from tensorplan.cli import COMMANDS

MODELS = textwrap.dedent("""
    import torch
    from tensorplan import zoo

    class MLP(torch.nn.Module):
        def __init__(self, hidden, extra):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, hidden)
            self.fc2 = torch.nn.Linear(hidden, 10)
            self.extra = extra

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc1(x))
            if self.extra:
                h = h.sin()
            return self.fc2(h)

    def small():
        torch.manual_seed(0)
        return zoo.Example(MLP(256, False).eval(), (torch.randn(8, 64),))

    def wide():
        torch.manual_seed(0)
        return zoo.Example(MLP(512, True).eval(), (torch.randn(8, 64),))
""")


def tensorplan(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorplan", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


def test_help_says_what_the_tool_does_with_an_example_per_command():
    done = tensorplan("--help")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: tensorplan [-h] [--version] COMMAND ...")
    assert "Take a PyTorch model to a fixed, verified memory plan" in done.stdout
    assert "one function pair" not in done.stdout
    names = [command.__name__.rpartition(".")[2] for command in COMMANDS]
    assert names == ["plan", "run", "dsa", "bench", "diff", "pte"]
    examples = done.stdout.split("examples:\n")[1]
    for name in names:
        assert re.search(rf"^  tensorplan {name} \S", examples, re.MULTILINE), name
    assert "zoo:NAME" in done.stdout and "package.module:factory" in done.stdout
    assert "tiny_gpt" in examples.split("built-in models:")[1]


def test_version():
    done = tensorplan("--version")
    assert done.returncode == 0
    assert done.stdout == (f"tensorplan {importlib.metadata.version('tensorplan')} "
                           f"(torch {torch.__version__})\n")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A directory with ``models.py``, the plans of ``small`` and ``wide`` as JSON and saved,
    one storage per value in graph order (so each value is a row of the diff)."""
    where = tmp_path_factory.mktemp("models")
    (where / "models.py").write_text(MODELS)
    for name in ("small", "wide"):
        done = tensorplan("plan", f"models:{name}", "--no-reuse", "--no-reorder", "--no-fold",
                          "--json", f"{name}.json", "--save",
                          f"{name}.tplan", "--html", f"{name}.html", "--timeline",
                          f"{name}.svg", "--header", f"{name}.h", cwd=where)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-5:] == [
            f"wrote plan JSON to {name}.json", f"wrote C header to {name}.h",
            f"wrote timeline to {name}.svg", f"wrote page to {name}.html",
            f"wrote program to {name}.tplan"]
    return where


def test_plan_writes_the_page_the_picture_and_the_header_of_a_factory(models):
    page = (models / "small.html").read_text()
    data = json.loads(re.search(r'id="plan-data">(.*?)</script>', page, re.S).group(1))
    plan = tp.load(models / "small.tplan").plan
    assert [s["id"] for s in data["storages"]] == sorted(plan.storages)
    assert data["arena"] == plan.arena_bytes == 16384
    assert data["values"]["gelu"] == {"op": "aten.gelu.default", "dtype": "float32",
                                      "shape": "[8, 256]", "dim_order": [0, 1], "nbytes": 8192}
    svg = (models / "small.svg").read_text()
    assert svg.startswith("<?xml") and ">gelu: 8.0 KiB<" in svg
    assert f">peak: step {data['peak']['step']}, 16.0 KiB live<" in svg
    assert ">activation (computed during a run)<" in svg
    header = (models / "small.h").read_text()
    assert '{"gelu", ' in header and "#define SMALL_NUM_VALUES 4u" in header


def test_diff_names_what_grew_and_what_appeared(models):
    done = tensorplan("diff", "small.json", "wide.tplan", cwd=models)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.splitlines()[0] == "small.json -> wide.tplan"
    arena = re.search(r"│ arena +│ +(.+?) │ +(.+?) │ +(.+?) │", out).groups()
    old, new = tp.load(models / "small.tplan").plan, tp.load(models / "wide.tplan").plan
    assert arena == ("16,384 B (16.0 KiB)", f"{new.arena_bytes:,} B (32.0 KiB)",
                     "+16,384 B (16.0 KiB) (+100.0 %)")
    grew = out.split("storages grew")[1].split("storage appeared")[0]
    assert re.search(r"│ addmm +│ +8,192 B \(8.0 KiB\) │ +16,384 B \(16.0 KiB\) │ "
                     r"+\+8,192 B \(8.0 KiB\) │", grew)
    assert re.search(r"│ gelu +│", grew)
    appeared = out.split("storage appeared")[1]
    assert re.search(r"│ sin +│ +- │ +16,384 B \(16.0 KiB\) │ +\+16,384 B \(16.0 KiB\) │",
                     appeared)
    assert "vanished" not in out and "shrank" not in out
    assert len(old.storages) == 4 and len(new.storages) == 5
    # fc1 64 -> 256 or 512, fc2 -> 10: (64 * h + h + h * 10 + 10) floats of 4 bytes
    assert (old.constant_bytes, new.constant_bytes) == (76_840, 153_640)
    assert re.search(r"│ constants +│ +76,840 B \(75.0 KiB\) │ +153,640 B \(150.0 KiB\) │ "
                     r"+\+76,800 B \(75.0 KiB\) \(\+99.9 %\) │", out)
    assert "warning" not in out and "constants before folding" not in out


def test_diff_of_a_plan_with_itself_says_nothing_changed(models):
    done = tensorplan("diff", "small.tplan", "small.json", cwd=models)
    assert done.returncode == 0
    assert done.stdout.rstrip().endswith("No storage changed size.")


@pytest.fixture(scope="module")
def zoo_plans(tmp_path_factory):
    """Plan JSON files of two unrelated zoo models, and of mlp planned without reuse."""
    where = tmp_path_factory.mktemp("zoo_plans")
    for name, target, *switches in (("gpt", "zoo:tiny_gpt"), ("mlp", "zoo:mlp"),
                                    ("mlp_noreuse", "zoo:mlp", "--no-reuse")):
        done = tensorplan("plan", target, *switches, "--json", f"{name}.json", cwd=where)
        assert done.returncode == 0, done.stderr
    return where


def _held(where, name: str) -> set[str]:
    """The value names the storages of a plan JSON file hold."""
    document = json.loads((where / f"{name}.json").read_text())
    return {value for storage in document["storages"] for value in storage["values"]}


def test_diff_of_unrelated_models_warns_that_they_share_no_structure(zoo_plans):
    done = tensorplan("diff", "gpt.json", "mlp.json", cwd=zoo_plans)
    assert done.returncode == 0, done.stderr
    gpt, mlp = _held(zoo_plans, "gpt"), _held(zoo_plans, "mlp")
    shared, every = len(gpt & mlp), len(gpt | mlp)
    assert shared / every < 0.25
    warning = " ".join(done.stdout.split("Memory plan")[0].split()[3:])
    assert warning == (f"warning: the two programs share no structure: {shared} of {every} "
                       f"value names ({shared / every:.0%}) are in both plans, where two "
                       f"versions of one model share at least 25%; storages are matched by "
                       f"name, so a row below may pair values of different models")


def test_diff_of_a_model_against_itself_with_another_option_does_not_warn(zoo_plans):
    done = tensorplan("diff", "mlp.json", "mlp_noreuse.json", cwd=zoo_plans)
    assert done.returncode == 0, done.stderr
    assert "1 storage appeared" in done.stdout  # gelu, no longer written over addmm
    assert "warning" not in done.stdout
    assert _held(zoo_plans, "mlp") == _held(zoo_plans, "mlp_noreuse")


def _section_rows(out: str, title: str) -> list[list[str]]:
    """The body rows of the diff section titled ``title``, as stripped cell texts."""
    section = out.split(title)[1].split("└")[0]
    return [[cell.strip() for cell in line.strip().strip("│").split("│")]
            for line in section.splitlines() if line.startswith("│")]


def test_diff_top_prints_that_many_rows_and_sums_the_rest(zoo_plans):
    done = tensorplan("diff", "gpt.json", "mlp.json", "--top", "3", cwd=zoo_plans)
    assert done.returncode == 0, done.stderr
    gpt, mlp = (json.loads((zoo_plans / f"{name}.json").read_text())["storages"]
                for name in ("gpt", "mlp"))
    names = {s["values"][0] for s in mlp}  # diff matches storages by their first value
    vanished = sorted((s for s in gpt if s["values"][0] not in names),
                      key=lambda s: (-s["size"], s["values"][0]))
    out = done.stdout
    assert f"{len(vanished)} storages vanished" in out and len(vanished) > 3
    rows = _section_rows(out, "storages vanished")
    assert [row[0] for row in rows] == [s["values"][0] for s in vanished[:3]]
    rest = sum(s["size"] for s in vanished[3:])
    assert re.search(rf"and {len(vanished) - 3} more, -{rest:,} B \(.*\) in all", out)
    assert "more," not in tensorplan("diff", "gpt.json", "mlp.json", "--top", "100",
                                     cwd=zoo_plans).stdout


@pytest.fixture(scope="module")
def broken(models):
    """``models`` with files ``diff`` must refuse beside the good ones."""
    torch.export.save(torch.export.export(torch.nn.ReLU(), (torch.randn(2),)),
                      models / "plain.pt2")
    (models / "noise.bin").write_bytes(bytes(range(256)))
    (models / "model.pte").write_bytes(b"<\x00\x00\x00ET12eh00" + bytes(64))  # a .pte's head
    torch.save({"weight": torch.ones(2)}, models / "checkpoint.pt")
    (models / "other.json").write_text('{"arena_bytes": 1}')
    (models / "list.json").write_text("[1, 2]")
    doc = json.loads((models / "small.json").read_text())
    (models / "schema.json").write_text(json.dumps({**doc, "schema": "other"}))
    doc["storages"][0]["size"] = "big"
    (models / "mistyped.json").write_text(json.dumps(doc))
    doc = json.loads((models / "small.json").read_text())
    doc["storages"][1]["offset"] = doc["storages"][2]["offset"]
    (models / "overlap.json").write_text(json.dumps(doc))
    with zipfile.ZipFile(models / "cut.tplan", "w") as archive:
        archive.writestr("tensorplan.json", '{"format": "tensorplan.program", "version": 1}')
    return models


GIVE = (r"give diff programs saved with `tensorplan plan TARGET --save F.tplan` or plans "
        r"written with `tensorplan plan TARGET --json F.json`")


@pytest.mark.parametrize(("name", "message"), [
    ("missing.json", r"missing.json: no such file"),
    ("plain.pt2", r"plain.pt2: a torch.export program holds no plan yet; plan it with "
                  r"`tensorplan plan plain.pt2 --save F.tplan` and compare that"),
    ("noise.bin", r"noise.bin: neither a tensorplan program nor JSON \(a format tensorplan "
                  rf"does not know\); {GIVE}"),
    ("model.pte", r"model.pte: an ExecuTorch program \(.pte\), not a tensorplan plan; plan the "
                  r"model or the .pt2 it was lowered from with `tensorplan plan TARGET --save "
                  r"F.tplan` and compare that"),
    ("checkpoint.pt", r"checkpoint.pt: a zip archive that is neither a tensorplan program nor "
                      rf"a torch.export program \(a torch.save checkpoint\?\); {GIVE}"),
    ("other.json", rf"other.json: JSON but not a tensorplan plan \(it has no \"schema\": "
                   rf"\"tensorplan.plan\"\); {GIVE}"),
    ("list.json", rf"list.json: JSON but not a tensorplan plan \(it has no \"schema\": "
                  rf"\"tensorplan.plan\"\); {GIVE}"),
    ("schema.json", r"schema.json: schema is 'other', expected 'tensorplan.plan'"),
    ("mistyped.json", r"mistyped.json: storages\[0\]: field 'size' should be int, got 'big'"),
    ("overlap.json", r"overlap.json: the saved plan is invalid: plan: invalid memory plan "
                     r"\(\d+ problems?\): the top-level graph: storage .* overlaps .*"),
    ("cut.tplan", r"cut.tplan: the archive has no plan.json"),
])
def test_diff_of_a_malformed_file_exits_2_with_one_line(broken, name, message):
    done = tensorplan("diff", "small.json", name, cwd=broken)
    assert done.returncode == 2
    assert done.stdout == ""
    assert re.fullmatch(rf"tensorplan diff: error: {message}\n", done.stderr), done.stderr


def test_dsa_html_writes_the_page_of_the_placement(tmp_path):
    (tmp_path / "stairs.csv").write_text("id,lower,upper,size\n10,0,2,4\n11,1,3,4\n12,2,4,8\n")
    done = tensorplan("dsa", "stairs.csv", "--algorithm", "greedy", "--html", "p.html",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "wrote page to p.html"
    page = (tmp_path / "p.html").read_text()
    data = json.loads(re.search(r'id="plan-data">(.*?)</script>', page, re.S).group(1))
    assert [(s["values"], s["offset"], s["size"], s["start"], s["end"])
            for s in data["storages"]] == [(["10"], 0, 4, 0, 2), (["11"], 8, 4, 1, 3),
                                           (["12"], 0, 8, 2, 4)]
    assert (data["arena"], data["lower_bound"], data["peak"]["step"]) == (12, 12, 2)
    assert "<title>stairs.csv: placement</title>" in page
