"""``tp.CompileOptions``: one object for what a compile is asked, kept on the program, saved with
it, built the same way by ``tp.compile``'s keywords and by the command line."""

from __future__ import annotations

import json

import pytest
import torch

import tensorplan as tp
from tensorplan.cli import main
from tensorplan.formats.options_json import decode_options, encode_options


class Chain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.relu().neg().exp()


ARGS = (torch.randn(64),)


def test_the_keywords_make_one_options_object_kept_on_the_program():
    program = tp.compile(Chain(), ARGS, reuse=False, algorithm="greedy", alignment=32,
                         chunks="auto", pin=None)
    options = program.options
    assert options == tp.CompileOptions.of(reuse=False, algorithm="greedy", alignment=32,
                                           chunks="auto")
    assert (options.schedule.reuse, options.schedule.reorder) == (False, True)
    assert (options.plan.algorithm, options.plan.alignment) == ("greedy", 32)
    assert options.rewrite.chunks == "auto" and options.rewrite.patches is None
    assert options.banks == tp.CompileOptions().banks


def test_options_given_whole_plan_as_the_same_keywords_do():
    options = tp.CompileOptions.of(reuse=False, alignment=64)
    whole = tp.compile(Chain(), ARGS, options=options)
    flat = tp.compile(Chain(), ARGS, reuse=False, alignment=64)
    assert whole.options == flat.options == options
    assert whole.plan == flat.plan
    assert whole.plan.arena_bytes == 2 * 256  # a 256-byte value and the one it is made from


def test_options_and_keywords_together_are_refused():
    with pytest.raises(tp.InputError, match="either as keywords or as options="):
        tp.compile(Chain(), ARGS, reuse=False, options=tp.CompileOptions())


def test_a_saved_program_loads_with_its_options(tmp_path):
    banks = [tp.Bank("sram", 512, 1.0), tp.Bank("dram", None, 40.0)]
    program = tp.compile(Chain(), ARGS, banks=banks, pin={"x": "dram"}, fold=False)
    program.save(tmp_path / "chain.tpz")
    loaded = tp.load(tmp_path / "chain.tpz")
    assert loaded.options == program.options
    assert loaded.options.banks.banks == tuple(banks)
    assert loaded.options.banks.pin == (("x", "dram"),)
    assert loaded.options.schedule.fold is False


def test_the_options_round_trip_through_json_and_a_broken_field_is_a_format_error():
    options = tp.CompileOptions.of(patches=(2, 3), max_overhead=1.5, time_limit=2.0,
                                   planner_params=tp.PlannerParams(wide_orders=("size",)),
                                   inputs_in_arena=False, max_arena_bytes=4096)
    encoded = json.loads(json.dumps(encode_options(options)))
    assert encoded["rewrite"] == {"patches": [2, 3], "max_overhead": 1.5, "chunks": None}
    assert decode_options(encoded, "plan.json") == options
    broken = dict(encoded, plan={**encoded["plan"], "no_such_field": 1})
    with pytest.raises(tp.FormatError, match="plan.json: options: not the compile options"):
        decode_options(broken, "plan.json")


def test_the_command_line_builds_the_same_object(tmp_path, capsys):
    saved = tmp_path / "mlp.tpz"
    assert main(["plan", "zoo:mlp", "--no-reuse", "--algorithm", "greedy", "--chunks", "2",
                 "--save", str(saved)]) == 0
    capsys.readouterr()
    expected = tp.CompileOptions.of(reuse=False, algorithm="greedy", chunks=2)
    loaded = tp.load(saved)
    assert loaded.options == expected
    example = tp.zoo.example("mlp")
    assert tp.compile(example.model, example.args, options=expected).plan == loaded.plan


def test_a_program_ships_with_the_options_it_was_compiled_with():
    pytest.importorskip("executorch")
    from tensorplan.integrations.executorch import lower

    program = tp.compile(Chain(), ARGS, reuse=False)
    ships = lower(program)  # no keyword, no options=: the program's own (no reuse)
    off = lower(program.exported_program, options=tp.CompileOptions.of(reuse=False))
    plain = lower(program.exported_program)  # the defaults: outputs over dying inputs
    links = {name: sum(p.in_place for p in shipped.methods.values())
             for name, shipped in (("ships", ships), ("off", off), ("plain", plain))}
    assert links == {"ships": 0, "off": 0, "plain": 3}  # relu over the input, neg, exp
    assert ships.arena_bytes == off.arena_bytes == 2 * 256 > plain.arena_bytes == 256
    with pytest.raises(tp.InputError, match="either as keywords or as options="):
        lower(program, reuse=False, options=tp.CompileOptions())
