"""``tensorplan dsa``: the table it prints, its --out file, and errors without tracebacks."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tensorplan.cli import main

INSTANCE = "id,lower,upper,size\n10,0,2,4\n11,1,3,4\n12,2,4,8\n"


@pytest.fixture
def instance(tmp_path: Path) -> Path:
    path = tmp_path / "stairs.csv"
    path.write_text(INSTANCE)
    return path


def test_dsa_prints_peak_bound_gap_and_optimality(instance, capsys):
    assert main(["dsa", str(instance), "--algorithm", "naive"]) == 0
    out = capsys.readouterr().out
    for text in ("naive", "16", "12", "33.33 %", "no"):
        assert text in out


def test_dsa_out_writes_an_offset_column(instance, tmp_path, capsys):
    out = tmp_path / "plan.csv"
    assert main(["dsa", str(instance), "--algorithm", "greedy", "--out", str(out)]) == 0
    assert "yes" in capsys.readouterr().out
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["id"] for row in rows] == ["10", "11", "12"]
    assert [int(row["offset"]) for row in rows] == [0, 8, 0]


def test_malformed_row_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper,size\n1,0,2,8\n2,0,two,8\n")
    assert main(["dsa", str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    expected = f"{bad}:3: expected integers for lower, upper, size; got '2,0,two,8'"
    assert captured.err == f"tensorplan dsa: error: {expected}\n"


def test_console_command_prints_no_traceback(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,lower,upper,size\n1,5,2,8\n")
    result = subprocess.run(
        [sys.executable, "-m", "tensorplan.cli", "dsa", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{bad}:2:" in result.stderr


def test_unknown_algorithm_is_a_usage_error(instance, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["dsa", str(instance), "--algorithm", "fastest"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fastest'" in capsys.readouterr().err
