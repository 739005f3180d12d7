"""``benchmarks/compare.py``: two benchmark reports side by side, the figures that got worse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from compare import figures, main, missing, regressions  # noqa: E402

OLD = """## Plans

| model | arena (B) | run | compile (s) | equal | GFLOP/s | ratio | links |
|---|---|---|---|---|---|---|---|
| a | 1,000 | 2.00 ms / best's 4.00 ms, 0.50x | 1.0 | yes | 30.0 | 0.60x | 3 / 1 |
| b | 500 | 1.00 ms / best's 1.00 ms, 1.00x | 2.0 | yes | 30.0 | 0.60x | 0 / 0 |
| c | 10 | 1.00 ms | 1.0 | yes | 1.0 | 1.00x | 0 / 0 |
| c | 10 | 1.00 ms | 1.0 | yes | 1.0 | 1.00x | 0 / 1 |

## Other

| model | arena (B) |
|---|---|
| a | 7 |
"""

ROWS_NOW = {  # the rows of OLD as the new report writes them
    "| a | 1,000 | 2.00 ms / best's 4.00 ms, 0.50x | 1.0 | yes | 30.0 | 0.60x | 3 / 1 |":
    "| a | 1,001 | 9.00 ms / best's 18.00 ms, 0.50x | 1.1 | yes | 27.0 | 0.61x | 0 / 0 |",
    "| b | 500 | 1.00 ms / best's 1.00 ms, 1.00x | 2.0 | yes | 30.0 | 0.60x | 0 / 0 |":
    "| b | 400 | 1.00 ms / best's 1.00 ms, 1.30x | 3.0 | NO | 20.0 | 0.70x | 9 / 9 |",
    "| c | 10 | 1.00 ms | 1.0 | yes | 1.0 | 1.00x | 0 / 1 |":  # the second row named c
    "| c | 11 | 1.00 ms | 1.0 | yes | 1.0 | 1.00x | 0 / 1 |",
}
NEW = "".join(ROWS_NOW.get(line, line) + "\n" for line in OLD.splitlines())


def _worse(old: str, new: str) -> list[tuple[str, str, str, str]]:
    return [(r.row, r.column, r.old, r.new) for r in regressions(figures(old), figures(new))]


def test_each_kind_of_figure_counts_past_its_noise_only() -> None:
    # a: one byte more counts; its run ratio (0.50x) holds though both times grew 4.5x under
    # load; 10% more compile time, 10% fewer GFLOP/s and a ratio one digit up are noise
    # b: fewer bytes is better; a run ratio 30% up, compile time 50% up, a check no longer
    # yes, a third fewer GFLOP/s and a ratio 17% up count; the links column is no figure
    assert _worse(OLD, NEW) == [
        ("a", "arena (B)", "1,000", "1,001"),
        ("b", "run", "1.00 ms / best's 1.00 ms, 1.00x", "1.00 ms / best's 1.00 ms, 1.30x"),
        ("b", "compile (s)", "2.0", "3.0"),
        ("b", "equal", "yes", "NO"),
        ("b", "GFLOP/s", "30.0", "20.0"),
        ("b", "ratio", "0.60x", "0.70x"),
        ("c (2)", "arena (B)", "10", "11"),  # the second row named c, not the first
    ]


def test_a_row_the_new_report_lacks_is_listed_and_the_same_report_is_clean() -> None:
    without_c = "".join(line for line in NEW.splitlines(keepends=True)
                        if not line.startswith("| c |"))
    assert missing(figures(OLD), figures(without_c)) == [("Plans", "c"), ("Plans", "c (2)")]
    assert _worse(OLD, OLD) == [] and missing(figures(OLD), figures(OLD)) == []


def test_the_command_exits_1_on_a_regression_and_names_it(tmp_path: Path, capsys) -> None:
    old, new = tmp_path / "old.md", tmp_path / "new.md"
    old.write_text(OLD)
    new.write_text(NEW)
    assert main([str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("7 of 25 figures worse than the noise")  # 6 figures a row
    assert "| Plans | b | equal | yes | NO |" in out and "| Plans | c (2) | arena (B) |" in out
    assert main([str(old), str(old)]) == 0


def test_a_report_at_a_commit_is_read_from_git() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare.py"), "git:HEAD",
                           str(ROOT / "benchmarks" / "RESULTS.md")], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert " figures worse than the noise" in done.stdout.splitlines()[0]
