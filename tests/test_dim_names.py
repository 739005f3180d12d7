"""Dynamic dims are called by the user's ``Dim`` names in every output: specs, tables, errors,
JSON, the C header, saved programs and ``.pt2`` files (torch's symbol only where none is known)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch.export import Dim

import tensorplan as tp
from tensorplan.cli import main
from tensorplan.frontend.dim_names import named
from tensorplan.frontend.pt2 import save_exported
from tensorplan.report.export import plan_to_c_header, plan_to_json
from tensorplan.rewrite.chunks import choose as choose_chunks

SYMBOL = re.compile(r"\bs\d+\b")  # how torch.export spells a dim it has no name for


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2


def _args() -> tuple[torch.Tensor]:
    return (torch.randn(12, 8, generator=torch.Generator().manual_seed(0)),)


SHAPES = ({0: Dim("rows", min=2, max=64)},)


@pytest.fixture(scope="module")
def prog() -> tp.Program:
    return tp.compile(_Net().eval(), _args(), dynamic_shapes=SHAPES)


@pytest.fixture(scope="module")
def symbol(prog: tp.Program) -> str:
    (found,) = prog.specs.dim_names
    return found


def test_the_spec_table_knows_the_dim_by_its_name(prog, symbol):
    assert SYMBOL.fullmatch(symbol)
    assert prog.specs.dim_names == {symbol: "rows"}
    assert prog.specs.describe("addmm") == "float32[rows<=64,16] dim_order=(0,1) 4096B"
    assert prog.specs["addmm"].describe() == f"float32[{symbol}<=64,16] dim_order=(0,1) 4096B"
    assert prog.plan.symbolic.dims[0].name == "rows"


def test_named_writes_each_symbol_by_its_name_and_leaves_longer_ones():
    names = {"s27": "seq", "s3": "batch"}
    assert named("4*s27*s3 + s270 + s3", names) == "4*seq*batch + s270 + batch"
    assert named("s27", {}) == "s27"


def test_cli_specs_and_plan_print_no_torch_symbol(tmp_path, capsys):
    factory = tmp_path / "names_model.py"
    factory.write_text(
        "import torch\nfrom torch.export import Dim\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 16)\n"
        "    def forward(self, x):\n        return torch.relu(self.fc(x)) * 2\n"
        "def make():\n"
        "    return Net(), (torch.randn(12, 8),), None, ({0: Dim('rows', min=2, max=64)},)\n")
    assert main(["plan", f"{factory}:make", "--specs", "--at", "rows=16"]) == 0
    out = capsys.readouterr().out
    assert "[rows<=64, 16]" in out and "rows=16" in out
    assert not SYMBOL.search(out)


def test_a_size_out_of_range_is_named_in_the_error(prog):
    with pytest.raises(tp.InputError) as raised:
        prog.run(torch.randn(80, 8))
    assert "outside the range [2, 64] of rows" in str(raised.value)
    assert not SYMBOL.search(str(raised.value))


def test_an_unbounded_dim_is_named_in_the_error():
    with pytest.raises(tp.UnboundedShapeError) as raised:
        tp.compile(_Net().eval(), _args(), dynamic_shapes=({0: Dim("rows")},))
    message = str(raised.value)
    assert "symbols: rows" in message and not SYMBOL.search(message)


def test_json_and_c_header_use_the_name(prog, symbol):
    document = json.loads(json.dumps(plan_to_json(prog)))
    values = {v["name"]: v for v in document["values"]}
    assert values["addmm"]["sym_shape"] == ["rows", "16"]
    assert document["symbolic"]["dims"][0] | {"example": 0} == \
        {"name": "rows", "symbol": symbol, "lower": 2, "upper": 64, "example": 0}
    header = plan_to_c_header(prog)
    assert "int64_t rows" in header and not SYMBOL.search(header)


def test_a_saved_program_keeps_the_names(prog, tmp_path):
    prog.save(tmp_path / "p.tplan")
    loaded = tp.load(tmp_path / "p.tplan")
    assert loaded.specs.describe("addmm") == "float32[rows<=64,16] dim_order=(0,1) 4096B"
    assert loaded.plan.arena_bytes_at(rows=16) == prog.plan.arena_bytes_at(rows=16)


def test_a_pt2_from_torch_export_save_goes_by_the_symbol_and_says_why(prog, symbol, tmp_path):
    ep = tp.capture(_Net().eval(), _args(), dynamic_shapes=SHAPES)
    torch.export.save(ep, tmp_path / "plain.pt2")
    plain = tp.compile(str(tmp_path / "plain.pt2"))
    assert plain.specs.dim_names == {}
    assert plain.specs.describe("addmm") == f"float32[{symbol}<=64,16] dim_order=(0,1) 4096B"
    assert plain.plan.arena_bytes_at(**{symbol: 16}) == prog.plan.arena_bytes_at(rows=16)
    with pytest.raises(tp.InputError) as raised:
        plain.plan.arena_bytes_at(rows=16)
    message = str(raised.value)
    assert f"the program's dims are {symbol} in [2, 64]" in message
    assert "torch.export.save keeps none" in message


def test_a_pt2_written_by_tensorplan_keeps_the_names(prog, tmp_path):
    ep = tp.capture(_Net().eval(), _args(), dynamic_shapes=SHAPES)
    save_exported(ep, tmp_path / "named.pt2", prog.specs.dim_names)
    again = tp.compile(str(tmp_path / "named.pt2"))
    assert again.specs.describe("addmm") == "float32[rows<=64,16] dim_order=(0,1) 4096B"
    assert again.plan.arena_bytes_at(rows=16) == prog.plan.arena_bytes_at(rows=16)


def test_a_chunking_reason_names_the_dim():
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 64),
                                torch.nn.GELU(), torch.nn.Linear(64, 16)).eval()
    program = tp.capture(model, (torch.randint(0, 50, (1, 32)),),
                         dynamic_shapes=({1: Dim("seq", min=2)},))
    _, chunking = choose_chunks(program, "auto", arena_of=lambda _: 1)  # no plan: unbounded
    reason = chunking.declined
    assert "the dim seq has no upper bound" in reason and not SYMBOL.search(reason)
