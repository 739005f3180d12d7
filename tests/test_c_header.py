"""The C header's value table, checked from C: a program compiled with the strictest flags.

The C side walks ``<model>_values`` and checks what a device runtime relies on: no two values of
different storages, in one graph and live at a common step, overlap; every offset respects the
alignment; every value lies inside the arena. It prints how many live pairs it compared, so a
table that lost its values cannot pass.
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
import torch
from shared_models import Branches

import tensorplan as tp
from tensorplan import zoo
from tensorplan.report import plan_to_c_header
from tensorplan.report.c_values import DTYPE_CODES, KIND_CODES
from tensorplan.report.export import c_identifier

CC = ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

CHECK_C = r"""
#include <stdio.h>
#include "plan.h"

int main(void) {
    unsigned long pairs = 0;
    int bad = 0;
    unsigned i, j;
    for (i = 0; i < NUM_VALUES; ++i) {
        const tensorplan_value_t *a = &VALUES[i];
        if (a->offset % ALIGNMENT != 0) {
            printf("misaligned %s at %llu\n", a->name, (unsigned long long)a->offset);
            bad = 1;
        }
        if (a->offset + a->size > ARENA_BYTES) {
            printf("outside the arena %s\n", a->name);
            bad = 1;
        }
        for (j = i + 1; j < NUM_VALUES; ++j) {
            const tensorplan_value_t *b = &VALUES[j];
            if (a->storage == b->storage || a->graph != b->graph) continue;
            if (a->start >= b->end || b->start >= a->end) continue;
            ++pairs;
            if (a->offset < b->offset + b->size && b->offset < a->offset + a->size) {
                printf("overlap %s %s\n", a->name, b->name);
                bad = 1;
            }
        }
    }
    printf("%lu live pairs\n", pairs);
    return bad;
}
"""


def _program(name: str) -> tp.Program:
    if name == "branches":
        return tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)))
    e = zoo.example(name)
    return tp.compile(e.model, e.args, e.kwargs, dynamic_shapes=e.dynamic_shapes)


def _planned_values(program: tp.Program) -> list[tuple[str, tp.TensorSpec]]:
    return [(n, s) for n, s in program.specs.tensors() if s.storage is not None]


def _live_pairs(program: tp.Program) -> int:
    """How many value pairs the C program must compare: different storages, one graph, live
    at a common step."""
    rows = [program.plan.storages[s.storage] for _, s in _planned_values(program)]
    return sum(1 for i, a in enumerate(rows) for b in rows[i + 1:]
               if a.id != b.id and a.graph == b.graph and a.start < b.end and b.start < a.end)


def _check(program: tp.Program, name: str, tmp_path) -> subprocess.CompletedProcess:
    """Compile the header of ``program`` with the check program, run it."""
    prefix = c_identifier(name)
    (tmp_path / "plan.h").write_text(plan_to_c_header(program, name))
    (tmp_path / "check.c").write_text(
        f"#define NUM_VALUES {prefix}_NUM_VALUES\n#define VALUES {prefix.lower()}_values\n"
        f"#define ALIGNMENT {prefix}_ALIGNMENT\n#define ARENA_BYTES {prefix}_ARENA_BYTES\n"
        + CHECK_C)
    built = subprocess.run([*CC, "check.c", "-o", "check"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stderr
    return subprocess.run([str(tmp_path / "check")], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", ["mlp", "convnet", "kv_cache", "tiny_gpt", "branches"])
def test_the_c_side_finds_no_overlap_and_every_offset_aligned(name, tmp_path):
    program = _program(name)
    run = _check(program, name, tmp_path)
    assert run.returncode == 0, run.stdout
    assert run.stdout.splitlines() == [f"{_live_pairs(program)} live pairs"]
    assert _live_pairs(program) > 0


def test_the_c_side_catches_two_live_values_at_one_offset(tmp_path):
    e = zoo.example("mlp")  # one storage per value, so addmm and gelu have their own
    program = tp.compile(e.model, e.args, reuse=False, reorder=False, fold=False)
    storages = program.plan.storages  # addmm [6, 8) and gelu [7, 10) are live together at 7
    moved = dataclasses.replace(storages[2], offset=storages[1].offset + 16)
    broken = dataclasses.replace(program, plan=dataclasses.replace(
        program.plan, storages={**storages, 2: moved}))
    run = _check(broken, "mlp", tmp_path)
    assert run.returncode == 1
    assert "overlap addmm gelu" in run.stdout.splitlines()


def test_the_c_side_catches_a_misaligned_offset(tmp_path):
    program = _program("mlp")
    storages = program.plan.storages
    moved = dataclasses.replace(storages[3], offset=storages[3].offset + 4)
    broken = dataclasses.replace(program, plan=dataclasses.replace(
        program.plan, storages={**storages, 3: moved}))
    run = _check(broken, "mlp", tmp_path)
    assert run.returncode == 1
    assert f"misaligned addmm_1 at {moved.offset}" in run.stdout.splitlines()


def test_each_row_holds_the_value_as_the_plan_describes_it():
    program = _program("convnet")
    header = plan_to_c_header(program, "convnet")
    x = program.plan.storages[program.specs["x"].storage]
    assert "#define CONVNET_NUM_VALUES" in header and "#define CONVNET_NUM_GRAPHS 1u" in header
    assert (f'    {{"x", {x.id}u, 0u, {x.offset}u, 24576u, {x.start}u, {x.end}u, 6u, 0u, 4u, '
            "convnet_value_dims + 0, convnet_value_dim_orders + 0}") in header
    assert "    2u, 3u, 32u, 32u," in header.split("convnet_value_dims[")[1]
    assert "    0u, 2u, 3u, 1u," in header.split("convnet_value_dim_orders[")[1]  # channels_last


def test_subgraph_values_name_their_graph():
    program = _program("branches")
    header = plan_to_c_header(program, "branches")
    assert ('static const char *const branches_graphs[BRANCHES_NUM_GRAPHS] = {\n    "",\n'
            '    "false_graph_0/",\n    "true_graph_0/"\n};') in header
    neg = program.plan.storages[program.specs["false_graph_0/neg"].storage]
    assert f'{{"false_graph_0/neg", {neg.id}u, 1u, {neg.offset}u, 256u,' in header


def test_two_headers_share_the_value_type_in_one_translation_unit(tmp_path):
    (tmp_path / "a.h").write_text(plan_to_c_header(_program("mlp"), "mlp"))
    (tmp_path / "b.h").write_text(plan_to_c_header(_program("branches"), "branches"))
    (tmp_path / "both.c").write_text(
        '#include "a.h"\n#include "b.h"\n'
        "int main(void) { return (int)(mlp_values[0].rank + branches_values[0].dtype"
        " - 8u + TENSORPLAN_KIND_INPUT); }\n")
    built = subprocess.run([*CC, "both.c", "-o", "both"], cwd=tmp_path, capture_output=True,
                           text=True, check=False)
    assert built.returncode == 0, built.stderr
    assert subprocess.run([str(tmp_path / "both")], check=False).returncode == 0


def test_dtype_codes_are_executorchs_scalar_types():
    from executorch.exir.scalar_type import ScalarType
    from executorch.exir.tensor import scalar_type_table

    beyond_its_table = {torch.quint2x4: ScalarType.QUINT2x4, torch.uint64: ScalarType.UINT64,
                        torch.float8_e5m2fnuz: ScalarType.FLOAT8E5M2FNUZ,
                        torch.float8_e4m3fnuz: ScalarType.FLOAT8E4M3FNUZ}
    expected = {d: t.value for d, t in {**scalar_type_table, **beyond_its_table}.items()}
    assert DTYPE_CODES == expected
    assert KIND_CODES == {"input": 0, "state": 1, "activation": 2}
