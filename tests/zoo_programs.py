"""Zoo models compiled once per test process, and the checks the model-level tests share."""

from __future__ import annotations

import functools
import subprocess
import sys

import tensorplan as tp
from tensorplan import zoo


@functools.cache
def compiled(name: str) -> tp.Program:
    """The zoo model ``name`` compiled with the default options (cached per process)."""
    example = zoo.example(name)
    return tp.compile(example.model, example.args, example.kwargs,
                      dynamic_shapes=example.dynamic_shapes)


def check_plan_is_tight(program: tp.Program) -> None:
    """The plan verifies and is within 2 % of its lower bound."""
    plan = program.plan
    plan.verify()
    assert plan.lower_bound_bytes > 0
    assert plan.lower_bound_bytes <= plan.arena_bytes <= 1.02 * plan.lower_bound_bytes


def listed_in_a_fresh_process(prefixes: tuple[str, ...],
                              packages: tuple[str, ...]) -> tuple[list[str], dict[str, bool]]:
    """The ``zoo.names()`` starting with one of ``prefixes``, and whether listing them imported
    each of ``packages``, in a new interpreter (so nothing this process imported counts)."""
    code = ("import sys, tensorplan.zoo as zoo; "
            f"print(*(n for n in zoo.names() if n.startswith({prefixes!r})), sep=','); "
            f"print(*(p in sys.modules for p in {packages!r}), sep=',')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    names, imported = result.stdout.splitlines()
    return names.split(","), dict(zip(packages, (flag == "True" for flag in imported.split(",")),
                                      strict=True))
