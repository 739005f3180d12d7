"""Memory banks (``tensorplan.banks``, issue 19): each storage in the bank that makes its
traffic cheapest, each bank its own verified arena."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import tensorplan as tp
from tensorplan.errors import InputError, PlanError

KIB = 1024


class Hot(torch.nn.Module):
    """A 16 KiB value read once, and four 4 KiB values read eight times each, live together."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        big = x.exp()
        small = [(y * (i + 1)).cos() for i in range(4)]
        total = big.sum()
        for _ in range(8):
            total = total + sum(s.sum() for s in small)
        return total


def _hot(**options) -> tuple[tp.Program, tuple[torch.Tensor, ...]]:
    args = (torch.randn(64, 64), torch.randn(32, 32))
    banks = [tp.Bank("sram", 16 * KIB + 64, 1.0), tp.Bank("dram", None, 40.0)]
    return tp.compile(Hot(), args, banks=banks, reuse=False, reorder=False, **options), args


def _largest_first(plan: tp.MemoryPlan) -> float:
    """The cost of largest-first (ExecuTorch's ``banked_greedy`` idea): each storage, biggest
    first, into the fastest bank whose live bytes stay within its capacity."""
    banks, load = plan.banks, {}
    cost = 0.0
    for storage in sorted(plan.storages.values(), key=lambda s: -s.size):
        for bank in banks:
            steps = range(storage.start, storage.end)
            if bank.capacity is None or all(
                    load.get((bank.name, t), 0) + storage.size <= bank.capacity for t in steps):
                for t in steps:
                    load[(bank.name, t)] = load.get((bank.name, t), 0) + storage.size
                cost += storage.traffic * bank.cost
                break
    return cost


def test_the_fast_bank_holds_the_bytes_read_most_not_the_largest() -> None:
    prog, args = _hot()
    plan = prog.plan
    assert plan.bank_of("exp") == "dram"
    assert {plan.bank_of(f"cos{suffix}") for suffix in ("", "_1", "_2", "_3")} == {"sram"}
    sram, dram = plan.banks
    assert (sram.name, sram.capacity, dram.capacity) == ("sram", 16 * KIB + 64, None)
    assert sram.arena_bytes <= sram.capacity and sram.arena_bytes == sram.lower_bound_bytes
    assert plan.arena_bytes == sram.arena_bytes + dram.arena_bytes
    # largest-first puts x, the biggest, in sram and spills the values read most
    assert (plan.traffic_cost, _largest_first(plan)) == (2_662_980.0, 3_781_188.0)
    # proven optimal: no assignment that fits costs less, or serves more from sram
    assert plan.traffic_cost_bound == plan.traffic_cost
    assert plan.served_bound_bytes == sram.traffic_bytes == 205_380
    assert plan.traffic_cost == sum(s.traffic * next(b.cost for b in plan.banks
                                                     if b.name == s.bank)
                                    for s in plan.storages.values())
    plan.verify()
    torch.testing.assert_close(prog.run(*args), Hot()(*args))


def test_traffic_counts_each_write_and_each_read() -> None:
    prog, _ = _hot()
    exp = prog.plan.storages[prog.specs["exp"].storage]
    assert exp.traffic == 16 * KIB * 2  # written once by exp, read once by its sum
    cos = prog.plan.storages[prog.specs["cos"].storage]
    assert cos.traffic == 4 * KIB * (1 + 8)  # written once, read by each of eight sums
    x = prog.plan.storages[prog.specs["x"].storage]
    assert x.traffic == 16 * KIB * 2  # copied in, read by exp


def test_pins_are_honoured() -> None:
    prog, args = _hot(pin={"x": "sram", "cos_3": "dram"})
    assert prog.plan.bank_of("x") == "sram" and prog.plan.bank_of("cos_3") == "dram"
    prog.plan.verify()
    torch.testing.assert_close(prog.run(*args), Hot()(*args))


def test_a_capacity_nothing_can_meet_names_the_step_and_the_bytes() -> None:
    args = (torch.randn(64, 64), torch.randn(32, 32))
    banks = [tp.Bank("sram", 16 * KIB + 64, 1.0), tp.Bank("dram", 16 * KIB + 64, 40.0)]
    with pytest.raises(PlanError, match=r"at step 2 \('exp'\) the live values take 36864 B, "
                                        r"above the 32896 B of all banks together"):
        tp.compile(Hot(), args, banks=banks, reuse=False, reorder=False)
    small = [tp.Bank("sram", 8 * KIB, 1.0), tp.Bank("dram", 8 * KIB, 40.0)]
    with pytest.raises(PlanError, match=r"storage 0 \(16384 B, live from step 0, 'x'\) is "
                                        r"larger than every bank \(the largest holds 8192 B\)"):
        tp.compile(Hot(), args, banks=small, reuse=False, reorder=False)


def test_pins_over_a_banks_capacity_are_refused() -> None:
    args = (torch.randn(64, 64), torch.randn(32, 32))
    banks = [tp.Bank("sram", 8 * KIB, 1.0), tp.Bank("dram", None, 40.0)]
    with pytest.raises(PlanError, match="the values pinned to 'sram' take 16384 B"):
        tp.compile(Hot(), args, banks=banks, pin={"exp": "sram"}, reuse=False, reorder=False)


def test_every_bank_is_verified_on_its_own() -> None:
    prog, _ = _hot()
    plan = prog.plan
    cos, cos_1 = (plan.storages[prog.specs[v].storage] for v in ("cos", "cos_1"))
    assert cos.bank == cos_1.bank == "sram" and cos.offset != cos_1.offset
    moved = dataclasses.replace(cos_1, offset=cos.offset)  # both live from step 6 to 76
    broken = dataclasses.replace(plan, storages={**plan.storages, moved.id: moved})
    with pytest.raises(PlanError, match="bank 'sram': .*overlap"):
        broken.verify()
    # the same offsets in two banks do not overlap
    dram = [s for s in plan.storages.values() if s.bank == "dram"]
    assert any(s.offset == cos.offset and s.start < cos.end and cos.start < s.end
               for s in dram)
    plan.verify()
    over = dataclasses.replace(plan, banks=(dataclasses.replace(plan.banks[0], capacity=64),
                                            plan.banks[1]))
    with pytest.raises(PlanError, match="bank 'sram': arena .* exceed its capacity 64 B"):
        over.verify()


def test_without_banks_the_plan_is_one_arena_as_before() -> None:
    args = (torch.randn(64, 64), torch.randn(32, 32))
    prog = tp.compile(Hot(), args, reuse=False, reorder=False)
    assert prog.plan.banks == () and prog.plan.bank_of("exp") == ""
    one = tp.compile(Hot(), args, banks=[tp.Bank("all", None, 1.0)], reuse=False,
                     reorder=False)
    assert one.plan.arena_bytes == prog.plan.arena_bytes
    assert {s.offset for s in one.plan.storages.values()} == \
        {s.offset for s in prog.plan.storages.values()}


def test_banks_survive_save_and_load(tmp_path) -> None:
    prog, args = _hot()
    prog.save(tmp_path / "hot.tplan")
    loaded = tp.load(tmp_path / "hot.tplan")
    assert loaded.plan == prog.plan
    torch.testing.assert_close(loaded.run(*args), Hot()(*args))


@pytest.mark.parametrize("banks, message", [
    ([], "non-empty list"),
    ([tp.Bank("a", None, 1.0), tp.Bank("a", None, 2.0)], "unique"),
    ([tp.Bank("a", -1, 1.0)], "capacity -1"),
    ([tp.Bank("a", None, 0.0)], "cost 0.0"),
    ([tp.Bank("slow", None, 40.0), tp.Bank("fast", 1024, 1.0)], "fastest first"),
])
def test_malformed_banks_are_refused(banks, message) -> None:
    with pytest.raises(InputError, match=message):
        tp.compile(torch.nn.Linear(4, 4), (torch.randn(2, 4),), banks=banks)


def test_a_pin_must_name_a_value_and_a_bank() -> None:
    banks = [tp.Bank("sram", 1024, 1.0), tp.Bank("dram", None, 40.0)]
    model, args = torch.nn.Linear(4, 4), (torch.randn(2, 4),)
    with pytest.raises(InputError, match="not one of"):
        tp.compile(model, args, banks=banks, pin={"input": "l2"})
    with pytest.raises(InputError, match="cannot pin 'nothing'"):
        tp.compile(model, args, banks=banks, pin={"nothing": "sram"})
    with pytest.raises(InputError, match="need banks"):
        tp.compile(model, args, pin={"input": "sram"})


def test_a_pinned_constant_takes_its_banks_capacity_and_pays_its_cost() -> None:
    model, x = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                   torch.nn.Linear(256, 4)).eval(), torch.randn(8, 64)
    banks = [tp.Bank("sram", 80 * KIB, 1.0), tp.Bank("dram", None, 40.0)]
    plan = tp.compile(model, (x,), banks=banks, pin={"p_0_weight": "sram"}).plan
    sram, dram = plan.banks
    assert sram.constant_bytes == 256 * 64 * 4  # the first weight, read from sram
    assert dram.constant_bytes == plan.constant_bytes - sram.constant_bytes
    assert sram.arena_bytes + sram.constant_bytes <= 80 * KIB
    # every byte the run reads from a constant is paid at its bank's cost
    assert sram.traffic_bytes >= 256 * 64 * 4 and dram.traffic_bytes >= 4 * 256 * 4
    plan.verify()


def test_cli_plan_prints_each_bank_and_writes_them_in_json(tmp_path, capsys) -> None:
    import json

    from tensorplan.cli import main

    out = tmp_path / "plan.json"
    assert main(["plan", "zoo:mlp", "--bank", "sram=8KiB", "--bank", "dram@40",
                 "--pin", "x=dram", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "memory banks: traffic cost 3,283,008 (proven bound 3,283,008, +0.0%)" in text
    row = next(line for line in text.splitlines() if line.startswith("│ sram"))
    assert "8,192 B (8.0 KiB)" in row and "32,768 (x1)" in row
    doc = json.loads(out.read_text())
    assert [(b["name"], b["capacity"], b["cost"]) for b in doc["banks"]] == [
        ("sram", 8192, 1.0), ("dram", None, 40.0)]
    assert {s["bank"] for s in doc["storages"]} == {"sram", "dram"}
    assert doc["traffic_cost"] == 3_283_008.0  # 32,768 B x 1 + 81,256 B x 40


def test_cli_bank_costs_default_to_ten_times_the_one_before(capsys) -> None:
    from tensorplan.cli import main

    assert main(["plan", "zoo:mlp", "--bank", "tcm=4KiB", "--bank", "sram=8KiB",
                 "--bank", "dram"]) == 0
    text = capsys.readouterr().out
    for name, cost in (("tcm", "x1)"), ("sram", "x10)"), ("dram", "x100)")):
        assert next(line for line in text.splitlines()
                    if line.startswith(f"│ {name} ")).rstrip(" │").endswith(cost)


def test_a_bank_too_small_for_the_constants_names_the_one_to_read_them_from(capsys) -> None:
    """zoo:mlp's 76,840 B of constants do not fit a 1 KiB slowest bank: the error says how to
    read them from sram in Python and on the command line, and both ways do it."""
    from tensorplan import zoo
    from tensorplan.cli import main

    example = zoo.example("mlp")
    banks = [tp.Bank("sram", 1024 * KIB, 1.0), tp.Bank("dram", KIB, 10.0)]
    advice = ("banks: the constants read from 'dram' take 76840 B of its 1024 B; give it more "
              "capacity or read them from 'sram': constants_bank='sram' (--constants-bank sram "
              "on the command line)")
    with pytest.raises(PlanError) as info:
        tp.compile(example.model, example.args, banks=banks)
    assert str(info.value) == advice
    cli = ["plan", "zoo:mlp", "--bank", "sram=1MiB", "--bank", "dram=1KiB@10"]
    assert main(cli) == 2
    assert capsys.readouterr().err.strip() == f"tensorplan plan: error: {advice}"
    plan = tp.compile(example.model, example.args, banks=banks, constants_bank="sram").plan
    assert [b.constant_bytes for b in plan.banks] == [76840, 0]
    assert main([*cli, "--constants-bank", "sram"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ sram"))
    assert "76,840 B (75.0 KiB)" in row


def test_the_constants_bank_option_needs_banks(capsys) -> None:
    from tensorplan.cli import main

    assert main(["plan", "zoo:mlp", "--constants-bank", "sram"]) == 2
    assert "--constants-bank need --bank" in capsys.readouterr().err


CHECK_BANKS_C = r"""
#include <stdio.h>
#include "plan.h"

static unsigned bank_of(uint32_t storage) {
    unsigned i;
    for (i = 0; i < HOT_NUM_STORAGES; ++i)
        if (hot_storage_ids[i] == storage) return hot_storage_banks[i];
    return 99u;
}

int main(void) {
    const uint64_t arena[HOT_NUM_BANKS] = {HOT_BANK_SRAM_ARENA_BYTES, HOT_BANK_DRAM_ARENA_BYTES};
    unsigned long pairs = 0;
    int bad = 0;
    unsigned i, j;
    if (HOT_BANK_SRAM_ARENA_BYTES > HOT_BANK_SRAM_CAPACITY) bad = 1;
    if (HOT_BANK_SRAM_ARENA_BYTES + HOT_BANK_DRAM_ARENA_BYTES != HOT_ARENA_BYTES) bad = 1;
    for (i = 0; i < HOT_NUM_VALUES; ++i) {
        const tensorplan_value_t *a = &hot_values[i];
        unsigned bank = bank_of(a->storage);
        if (bank >= HOT_NUM_BANKS || a->offset + a->size > arena[bank]) {
            printf("outside its bank %s\n", a->name);
            bad = 1;
            continue;
        }
        for (j = i + 1; j < HOT_NUM_VALUES; ++j) {
            const tensorplan_value_t *b = &hot_values[j];
            if (a->storage == b->storage || bank_of(b->storage) != bank) continue;
            if (a->start >= b->end || b->start >= a->end) continue;
            ++pairs;
            if (a->offset < b->offset + b->size && b->offset < a->offset + a->size) {
                printf("overlap %s %s\n", a->name, b->name);
                bad = 1;
            }
        }
    }
    printf("%lu %u %u\n", pairs, HOT_BANK_SRAM_NUM_STORAGES, HOT_BANK_DRAM_NUM_STORAGES);
    return bad;
}
"""


def test_the_c_header_has_one_arena_and_offset_table_per_bank(tmp_path) -> None:
    import subprocess

    from tensorplan.report import plan_to_c_header

    prog, _ = _hot()
    (tmp_path / "plan.h").write_text(plan_to_c_header(prog, "hot"))
    (tmp_path / "check.c").write_text(CHECK_BANKS_C)
    built = subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic",
                            "check.c", "-o", "check"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stdout
    storages = prog.plan.storages.values()
    in_sram = sum(s.bank == "sram" for s in storages)
    rows = [prog.plan.storages[spec.storage] for _, spec in prog.specs.tensors()
            if spec.storage is not None]  # one per value, as the C side walks them
    pairs = sum(1 for i, a in enumerate(rows) for b in rows[i + 1:] if a.id != b.id
                and a.bank == b.bank and a.start < b.end and b.start < a.end)
    assert pairs > 0 and ran.stdout.split() == [str(pairs), str(in_sram),
                                                str(len(storages) - in_sram)]


def test_the_picture_labels_each_bank(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    from tensorplan.report import plot_timeline

    prog, _ = _hot()
    plot_timeline(prog, tmp_path / "hot.svg", "hot")
    svg = (tmp_path / "hot.svg").read_text()
    assert "bank sram: arena 16,448 B (16.1 KiB) of capacity 16,448 B (16.1 KiB)" in svg
    assert "bank dram: arena 24,576 B (24.0 KiB) of capacity unbounded" in svg


def test_a_value_read_early_is_spilled_so_that_a_busier_one_gets_the_fast_bank() -> None:
    from tensorplan.banks.choice import BankProblem, Item, Move
    from tensorplan.banks.moves import plan_moves

    banks = (tp.Bank("sram", KIB, 1.0), tp.Bank("dram", None, 40.0))
    early = tuple([(0, KIB)] + [(1 + i % 3, KIB) for i in range(10)] + [(9, KIB)])
    a = Item("a", KIB, 0, 10, 12 * KIB, accesses=early)
    b = Item("b", KIB, 5, 9, 11 * KIB)
    problem = BankProblem(banks, 10, tuple(f"s{i}" for i in range(10)), {}, (0, 0), 10.0)
    chosen = plan_moves([a, b], problem)
    assert chosen.moves == (Move("a", 4, 0, 1),)  # copied to dram right after its last early read
    assert chosen.bank_of == {"a": 0, "b": 0}
    # a: written and read ten times in sram, copied (read 1 + written 40), read once at 40
    assert chosen.cost == 11 * KIB + 41 * KIB + 40 * KIB + 11 * KIB == chosen.cost_bound
    whole = plan_moves([dataclasses.replace(a, accesses=()), b], problem)
    assert whole.moves == () and whole.cost == 12 * KIB + 11 * KIB * 40
