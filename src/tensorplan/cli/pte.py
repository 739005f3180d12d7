"""``tensorplan pte TARGET -o F``: an ExecuTorch program carrying tensorplan's plan."""

from __future__ import annotations

import argparse
from typing import Any

from tensorplan.cli import options
from tensorplan.plan.planners.dispatch import PLANNERS

_SWITCHES = (("reuse", "in-place reuse and concatenation in place"),
             ("reorder", "tensorplan's node order"),
             ("fold", "choosing the folding of constants"),
             ("moves", "copies between banks (with --bank)"))


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``pte`` subcommand and its options."""
    parser = options.target_command(commands, "pte",
                                    "write an ExecuTorch .pte that carries tensorplan's plan")
    parser.add_argument("-o", "--output", required=True, metavar="F.pte",
                        help="where to write the program")
    parser.add_argument("--algorithm", default="auto", choices=sorted(PLANNERS),
                        help="planner (default auto)")
    options.add_switches(parser, _SWITCHES, "lower")
    parser.add_argument("--prefer", choices=("arena", "total", "time"), default="arena",
                        help="the folding kept: the smallest arena, then arena + constants "
                             "(default: the arena is the RAM), the smallest arena + "
                             "constants, then arena, or the smallest arena, then the fewest "
                             "instructions run at each call (time)")
    parser.add_argument("--check", action="store_true",
                        help="load the .pte in ExecuTorch's runtime, run the example inputs and "
                             "compare with eager (exit 1 if it differs, 2 if the runtime "
                             "refuses it)")
    options.add_bank_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Lower the target with ``to_executorch``, write the ``.pte``, print what it holds."""
    from tensorplan.cli.targets import compile_options, target_name
    from tensorplan.integrations.executorch import executorch_arena_bytes, lower
    from tensorplan.report.pte import pte_tables

    exported, eager = _exported(args.target)
    asked = compile_options(args)
    banks = asked.banks.banks if asked is not None else None
    shipped = lower(exported, options=asked, moves=args.moves, check=args.check, eager=eager,
                    prefer=args.prefer)
    greedy = executorch_arena_bytes(exported)
    options.write(args.output, "program",
                  lambda path: options.write_bytes(path, shipped.manager.buffer))
    options.console().print(pte_tables(target_name(args.target), shipped, greedy))
    for method, plan in shipped.methods.items():
        for mem_id, (bank, arena) in enumerate(zip(banks or (), plan.bank_arenas, strict=False),
                                               start=1):
            room = "unbounded" if bank.capacity is None else f"{bank.capacity:,} B"
            print(f"{method}: bank {bank.name} (mem_id {mem_id}, {room}): arena {arena:,} B")
        if banks:
            print(f"{method}: traffic cost {plan.traffic_cost:,.0f} (proven bound "
                  f"{plan.traffic_cost_bound:,.0f}); copies between banks: {plan.bank_copies}")
    if shipped.check is None:
        return 0
    check = shipped.check
    verdict = "equal to eager" if check.matches else "NOT equal to eager"
    print(f"check: ExecuTorch's runtime ran {check.method} on the example inputs: "
          f"{', '.join(check.outputs)}, {verdict} (max |error| {check.max_abs_error:.3g})")
    return 0 if check.matches else 1


def _exported(target: str) -> tuple[Any, Any]:
    """The target's exported program (a model target is captured, a file is read) and the eager
    model to check it against (None for a file: its exported module is run instead)."""
    from tensorplan.cli.targets import load_example, load_exported
    from tensorplan.frontend.capture import capture

    example = load_example(target)
    if example is None:
        return load_exported(target, command="pte"), None
    exported = capture(example.model, example.args, example.kwargs,
                       dynamic_shapes=example.dynamic_shapes)
    return exported, example.model
