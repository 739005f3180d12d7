"""``tensorplan plan TARGET``: compile a model, print its plan, write the files asked for."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from tensorplan.cli import options
from tensorplan.plan.planners.dispatch import PLANNERS

if TYPE_CHECKING:
    from tensorplan.plan.budget import Rewrite
    from tensorplan.program import Program

_SWITCHES = (("reuse", "in-place reuse of dying inputs"),
             ("reorder", "the memory-aware node order"),
             ("fold", "folding values of constants at compile time"))


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The ``plan`` subcommand and its options."""
    parser = options.target_command(commands, "plan", "compile a model and print its memory plan")
    parser.add_argument("--algorithm", default=None, choices=sorted(PLANNERS),
                        help="planner (default auto; a tensorplan file keeps its saved plan)")
    parser.add_argument("--alignment", type=options.positive_int, default=None, metavar="N",
                        help="offset alignment in bytes (default 16)")
    parser.add_argument("--max-arena", type=options.byte_count, default=None, metavar="N",
                        help="fail (exit 2) unless the arena fits N bytes (262144, 256KiB, 1.5MB)")
    parser.add_argument("--inputs-outside", action="store_true",
                        help="place the inputs in a buffer of their own after the arena (a "
                             "camera's frame buffer), not counted in it")
    options.add_switches(parser, _SWITCHES, "plan")
    parser.add_argument("--patches", type=options.patches, default=None, metavar="auto|RxC",
                        help="run the high-resolution prefix patch by patch: auto, or a grid "
                             "such as 4x4")
    parser.add_argument("--chunks", type=options.chunks, default=None, metavar="auto|N",
                        help="run each transformer layer's attention, MLP and residuals in N "
                             "chunks of token rows (auto: the count estimated smallest)")
    options.add_bank_options(parser)
    options.add_constants_bank(parser)
    parser.add_argument("--specs", action="store_true", help="print the spec table first")
    options.add_top(parser, "storages")
    parser.add_argument("--at", type=options.sizes, default=None, metavar="DIM=N[,DIM=N]",
                        help="print (and draw, with --timeline and --html) the plan at these "
                             "sizes of the dynamic dims (seq=16); dims not given are at their "
                             "upper bound")
    parser.add_argument("--json", metavar="F", help="write the plan and specs as JSON")
    parser.add_argument("--header", metavar="F", help="write the plan as a C header")
    parser.add_argument("--timeline", metavar="F.png", help="draw the plan over time (.png, .svg)")
    parser.add_argument("--html", metavar="F", help="write the interactive page of the plan")
    parser.add_argument("--save", metavar="F", help="save the compiled program (tp.load reads it)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Compile (or load) the target, print the spec table if asked and the plan, write files."""
    from tensorplan.cli.targets import compile_options, load_target
    from tensorplan.internal import stage

    program = load_target(args.target, compile_options(args), command=args.command)
    with stage("report", program.exported_program):
        _report(program, args)
    return 0


def _report(program: Program, args: argparse.Namespace) -> None:
    """The spec table if asked, the plan, the budget's headroom, and the files asked for."""
    from tensorplan.plan.budget import COMMAND_LINE, check_arena
    from tensorplan.report import plan_summary, spec_table
    from tensorplan.report.banks import bank_table
    from tensorplan.report.chunks import chunking_table, whole_table
    from tensorplan.report.patches import patching_table
    from tensorplan.report.symbolic import symbolic_summary

    console = options.console()
    if args.specs:
        console.print(spec_table(program.specs))
    if program.patching is not None:
        console.print(patching_table(program.patching))
    if program.chunking is not None:
        console.print(chunking_table(program.chunking))
        console.print(whole_table(program.chunking))
    if args.at is not None:
        console.print(plan_summary(program.plan, args.top, options.at_title(args.at), args.at))
    else:
        console.print(plan_summary(program, args.top))
    if program.plan.symbolic is not None:
        console.print(symbolic_summary(program.plan, args.at))
    if program.plan.banks:
        console.print(bank_table(program.plan))
    headroom = check_arena(program.plan, args.max_arena, lambda: _rewrites(program),
                           COMMAND_LINE)
    if headroom is not None:
        print(f"fits the budget of {args.max_arena:,} B with {headroom:,} B to spare")
    _write_outputs(program, args)


def _rewrites(program: Program) -> tuple[Rewrite, ...]:
    """What ``--patches auto`` and ``--chunks auto`` would plan, where the compile did not
    ask for them."""
    from tensorplan.program import Candidates, untried_rewrites

    return untried_rewrites(program.exported_program, Candidates(program.options),
                            program.options.rewrite)


def _write_outputs(program: Program, args: argparse.Namespace) -> None:
    from tensorplan.cli.targets import target_name
    from tensorplan.report import plan_to_c_header, plan_to_json
    from tensorplan.report.html import write_html

    name = target_name(args.target)
    writers = (
        (args.json, "plan JSON",
         lambda path: options.write_text(path, json.dumps(plan_to_json(program, name), indent=1))),
        (args.header, "C header",
         lambda path: options.write_text(path, plan_to_c_header(program, name))),
        (args.timeline, "timeline", lambda path: _timeline(program, path, name, args.at)),
        (args.html, "page", lambda path: write_html(program, path, name, args.at)),
        (args.save, "program", program.save),
    )
    for path, what, writer in writers:
        if path:
            options.write(path, what, writer)


def _timeline(program: Program, path: str, name: str, at: dict[str, int] | None) -> None:
    """The picture of the plan, at the sizes ``--at`` gives (the upper bounds without)."""
    from tensorplan.report import plot_timeline
    from tensorplan.report.subject import model_subject
    from tensorplan.report.timeline import plot_plan

    if at is None:
        plot_timeline(program, path, name)
    else:
        subject = model_subject(program, f"{name} {options.at_title(at)}", {}, at)
        plot_plan(program.plan.at(**at), path, subject)
