"""``benchmarks/run_all.py`` (``make bench``): sections run alone keep the others whole, each
section saying the commit and date it was measured at, with no chain of reports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import run_all  # noqa: E402


def _previous() -> str:
    sections = "".join(f"\n## {heading}\n\nMeasured at commit old{i} on 2026-12-01.\n\n"
                       f"| a | b |\n|---|---|\n| {i} | {i} |\n"
                       for i, (heading, _) in enumerate(run_all.SECTIONS))
    return "# Benchmark results\n\n## Machine\n\n- date: then\n" + sections


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts ``run_all`` runs, in order, each faked to take 12 s and print a summary;
    the commit faked as abc1234."""
    ran: list[str] = []

    def fake(script: str, timeout: float) -> run_all.Outcome:
        ran.append(script)
        return run_all.Outcome(script, True, "**Summary**: new.\n", 12.0)

    monkeypatch.setattr(run_all, "run_script", fake)
    monkeypatch.setattr(run_all, "_commit", lambda: "abc1234")
    return ran


def test_only_runs_its_section_and_copies_the_others_whole(tmp_path, monkeypatch) -> None:
    out = tmp_path / "RESULTS.md"
    out.write_text(_previous())
    ran = _recorded(monkeypatch)
    assert run_all.main(["--out", str(out), "--only", "pte"]) == 0
    assert ran == ["bench_pte.py"]
    sections = run_all.sections(out.read_text())
    shipped = sections["Shipped: the .pte with tensorplan's plan, run in ExecuTorch's runtime"]
    assert shipped.startswith("`python benchmarks/bench_pte.py` at commit abc1234, ")
    assert shipped.endswith(", 12 s.\n\n**Summary**: new.\n")
    for i, (heading, script) in enumerate(run_all.SECTIONS):
        if script != "bench_pte.py":
            assert sections[heading] == (f"Measured at commit old{i} on 2026-12-01.\n\n"
                                         f"| a | b |\n|---|---|\n| {i} | {i} |\n")
    assert "kept from" not in out.read_text()


def test_a_short_name_is_its_script_and_an_unknown_one_is_refused() -> None:
    assert run_all.script_name("chunks") == "bench_chunks.py"
    with pytest.raises(SystemExit, match="no benchmark 'nope'"):
        run_all.script_name("nope")


def test_two_at_a_time_the_dsa_planners_run_last_with_nothing_beside(tmp_path, monkeypatch
                                                                     ) -> None:
    """``--jobs 2`` runs two scripts at once, but ``ALONE``'s (the DSA planners, whose figures
    depend on wall time) only once every other has ended; the report says how it ran."""
    import threading
    import time

    running, events, lock = set(), [], threading.Lock()

    def fake(script: str, timeout: float) -> run_all.Outcome:
        with lock:
            events.append((script, sorted(running)))
            running.add(script)
        time.sleep(0.05)
        with lock:
            running.discard(script)
        return run_all.Outcome(script, True, "**Summary**: new.\n", 1.0)

    monkeypatch.setattr(run_all, "run_script", fake)
    monkeypatch.setattr(run_all, "_commit", lambda: "abc1234")
    out = tmp_path / "RESULTS.md"
    assert run_all.main(["--out", str(out), "--jobs", "2"]) == 0
    assert [script for script, _ in events[-1:]] == ["bench_dsa.py"]
    assert events[-1][1] == []  # nothing ran beside it
    assert any(beside for _, beside in events[:-1])  # the others ran two at a time
    assert f"{len(run_all.SECTIONS)} of {len(run_all.SECTIONS)} sections" in out.read_text()
    assert "2 at a time" in out.read_text()


def test_the_longest_section_of_the_last_report_runs_first(tmp_path, monkeypatch) -> None:
    """The pool starts with the sections the report at ``--out`` says took longest, so that
    two at a time end together; one it has no time for starts first (it may be long)."""
    seconds = {script: 10.0 * i for i, (_, script) in enumerate(run_all.SECTIONS)}
    seconds.pop("bench_plan.py")
    previous = "# Benchmark results\n" + "".join(
        f"\n## {heading}\n\n`python benchmarks/{script}` at commit old, 2026-12-01 10:00 UTC, "
        f"{seconds[script]:.0f} s.\n\n| a |\n|---|\n| 1 |\n"
        for heading, script in run_all.SECTIONS if script in seconds)
    out = tmp_path / "RESULTS.md"
    out.write_text(previous)
    assert run_all.last_seconds(previous) == seconds
    ran = _recorded(monkeypatch)
    assert run_all.main(["--out", str(out)]) == 0
    others = sorted((s for s in seconds if s not in run_all.ALONE), key=lambda s: -seconds[s])
    assert ran == ["bench_plan.py", *others, *run_all.ALONE]


def test_the_machine_block_names_the_commit_the_sections_ran_at(tmp_path, monkeypatch) -> None:
    """A commit made while the run goes on changes neither the sections' commit nor the
    machine block's: both are read when the run starts."""
    _recorded(monkeypatch)
    commits = iter(["start", "start", "later", "later"])
    monkeypatch.setattr(run_all, "_commit", lambda: next(commits))
    out = tmp_path / "RESULTS.md"
    out.write_text(_previous())
    assert run_all.main(["--out", str(out), "--only", "pte"]) == 0
    assert "- commit: start\n" in out.read_text()
    assert "`python benchmarks/bench_pte.py` at commit start, " in out.read_text()
