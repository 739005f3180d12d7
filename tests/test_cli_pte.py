"""``tensorplan pte``: write an ExecuTorch program with tensorplan's plan and say what it holds."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("executorch")

from executorch.runtime import Runtime  # noqa: E402

from tensorplan import zoo  # noqa: E402
from tensorplan.cli import main  # noqa: E402


def _arena(output: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith("│ arena "))
    return line.split("│")[2].strip()


def test_pte_writes_a_program_that_runs_and_prints_its_plan(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.pte"
    assert main(["pte", "zoo:mlp", "-o", str(path)]) == 0
    output = capsys.readouterr().out
    assert f"wrote program to {path}" in output
    assert _arena(output) == "10,240 B (10.0 KiB)"
    assert "│ ExecuTorch's greedy arena (default lowering) │ 75,776 B (74.0 KiB)" in output
    assert "│ forward │ + in-place reuse " in output
    assert "2 products made linear without a transpose" in output and "│ none    │" in output
    example = zoo.example("mlp")
    program = Runtime.get().load_program(path.read_bytes())  # owns the bytes its method runs
    method = program.load_method("forward")
    with torch.no_grad():
        expected = example.model(*example.args)
    torch.testing.assert_close(method.execute(list(example.args))[0], expected)


def test_pte_switches_turn_the_techniques_off(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.pte"
    assert main(["pte", "zoo:mlp", "-o", str(path), "--no-reuse", "--no-reorder", "--no-fold",
                 "--algorithm", "greedy"]) == 0
    output = capsys.readouterr().out
    assert _arena(output) == "16,384 B (16.0 KiB)"  # the linear rewrite alone
    assert "0 in-place, 0 concat links" in output and "│ as configured │" in output


def test_pte_needs_an_output_file(capsys) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["pte", "zoo:mlp"])
    assert caught.value.code == 2
    assert "-o/--output" in capsys.readouterr().err


def test_pte_with_banks_writes_one_mem_id_per_bank(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.pte"
    assert main(["pte", "zoo:mlp", "-o", str(path), "--bank", "sram=8KiB",
                 "--bank", "dram@40"]) == 0
    output = capsys.readouterr().out
    assert "forward: bank sram (mem_id 1, 8,192 B): arena 8,192 B" in output
    assert "forward: bank dram (mem_id 2, unbounded): arena 2,048 B" in output
    assert "forward: traffic cost 209,408 (proven bound 209,408); copies between banks: 0" \
        in output
    example = zoo.example("mlp")
    program = Runtime.get().load_program(path.read_bytes())  # owns the bytes its method runs
    method = program.load_method("forward")
    with torch.no_grad():
        expected = example.model(*example.args)
    torch.testing.assert_close(method.execute(list(example.args))[0].clone(), expected)


@pytest.mark.parametrize(("switch", "copies", "cost"), [((), 1, "296,319,008"),
                                                       (("--no-moves",), 0, "299,128,864")])
def test_pte_copies_between_banks_unless_told_not_to(tmp_path, capsys, switch, copies,
                                                     cost) -> None:
    # sram at 1/4 of tiny_gpt's 655,360 B arena (bench_banks.py's case, folding on)
    path = tmp_path / "tiny_gpt.pte"
    assert main(["pte", "zoo:tiny_gpt", "-o", str(path), "--bank", "sram=163840",
                 "--bank", "dram@40", *switch]) == 0
    output = capsys.readouterr().out
    assert f"forward: traffic cost {cost} (proven bound {cost}); copies between banks: " \
        f"{copies}" in output


def test_pte_says_which_folding_it_kept_and_takes_prefer(tmp_path, capsys) -> None:
    path = tmp_path / "mlp.pte"
    assert main(["pte", "zoo:mlp", "-o", str(path), "--prefer", "total"]) == 0
    assert "kept none: the only folding tried" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["pte", "zoo:mlp", "-o", str(path), "--prefer", "ram"])
    assert "invalid choice: 'ram'" in capsys.readouterr().err


def test_pte_prefer_time_keeps_the_folding_that_runs_fewer_instructions(tmp_path, capsys) -> None:
    """The zoo's small Llama: constant propagation plans the same arena with its masks and
    rotary tables read from the constants, so it runs 129 instructions where no folding runs
    176; ``--prefer time`` keeps it, and the table shows each folding's instruction count."""
    assert main(["pte", "zoo:hf_llama", "-o", str(tmp_path / "llama.pte"),
                 "--prefer", "time"]) == 0
    output = " ".join(capsys.readouterr().out.split())
    assert "instructions ┃ kept" in output
    assert "176 │ │" in output and "129 │ yes" in output
    assert "kept executorch const-prop: as small an arena as any, the fewest instructions run " \
        "at each call of those (none: arena 288,768 B" in output
