"""The ``tensorplan`` console command: the parser of every subcommand (one module each) and the
exit codes.

Every error tensorplan raises on purpose is printed as one line on stderr with exit code 2;
an ``InternalError`` (a bug in tensorplan) as one line and the node it failed at, exit code 3
(with ``TENSORPLAN_DEBUG=1``, the full traceback first, and the third-party warnings that are
otherwise dropped).
What a user sees first is ``DESCRIPTION`` and ``EXAMPLES`` (``tensorplan --help``). Building the
parser imports no torch: a command imports what it needs when it runs, and only ``--help``
loads the zoo to list its models.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import textwrap
import traceback
import warnings
from collections.abc import Iterator, Sequence

from tensorplan.cli import bench, diff, dsa, plan, pte, run
from tensorplan.cli.options import FORMS
from tensorplan.errors import InternalError, TensorPlanError
from tensorplan.internal import versions

EXIT_ERROR = 2  # exit code for a TensorPlanError (and argparse usage errors)
EXIT_INTERNAL = 3  # exit code for an InternalError: a bug in tensorplan

DESCRIPTION = f"""\
Take a PyTorch model to a fixed, verified memory plan: the shape bound, dtype and layout of
every tensor, one arena for all of them, and where each one lives in it. Then run the model
out of that arena, or hand the plan to a device as JSON or a C header.

{textwrap.fill(f"A TARGET is {FORMS}.", width=92)}
zoo:NAME is a built-in model; a factory is a function of yours that returns
(model, args[, kwargs, dynamic_shapes]) (the current directory is importable)."""

EXAMPLES = """\
examples:
  tensorplan plan zoo:tiny_gpt --html plan.html   plan a built-in model; open plan.html
  tensorplan plan mymodels:make_model --specs --timeline plan.png --header plan.h --json plan.json
  tensorplan plan zoo:mlp --save mlp.tplan        save the program with its plan
  tensorplan run zoo:tiny_gpt                     run out of the arena, compare with eager
  tensorplan dsa benchmarks/dsa/challenging_A.csv --html dsa.html
                                                  plan a CSV instance (id,lower,upper,size)
  tensorplan bench zoo:mlp benchmarks/dsa/resnet50.csv --algorithms greedy,auto
                                                  time and compare the planners
  tensorplan diff old.tplan new.tplan             what a model change cost in memory
  tensorplan pte zoo:tiny_gpt -o tiny_gpt.pte     an ExecuTorch program with tensorplan's plan

built-in models: {models}
`tensorplan COMMAND --help` lists a command's options."""

COMMANDS = (plan, run, dsa, bench, diff, pte)  # each module: add_parser(commands), run(args)


class _Parser(argparse.ArgumentParser):
    """The top-level parser: its epilog lists the built-in models, read only for ``--help``."""

    def format_help(self) -> str:
        from tensorplan import zoo

        models = textwrap.fill(", ".join(zoo.names()), width=80, subsequent_indent="  ")
        self.epilog = EXAMPLES.format(models=models)
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand in ``COMMANDS``, ``--help`` and ``--version``."""
    parser = _Parser(prog="tensorplan", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=versions())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=argparse.ArgumentParser)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


@contextlib.contextmanager
def third_party_noise_filtered() -> Iterator[None]:
    """Within: the warnings and log records below ERROR that torch and the model packages print
    (deprecations, optional native libraries that do not load) are dropped; with
    ``TENSORPLAN_DEBUG=1`` they are shown. What the command prints is its own."""
    if os.environ.get("TENSORPLAN_DEBUG") == "1":
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 on a tensorplan error, no traceback;
    3 on an internal error)."""
    args = build_parser().parse_args(argv)
    try:
        with third_party_noise_filtered():
            return args.run(args)
    except InternalError as error:
        if os.environ.get("TENSORPLAN_DEBUG") == "1":
            traceback.print_exception(error)
        print(f"tensorplan {args.command}: {error.summary}", file=sys.stderr)
        if error.node is not None:
            print(f"  at node {error.node}", file=sys.stderr)
        return EXIT_INTERNAL
    except TensorPlanError as error:
        text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        print(f"tensorplan {args.command}: error: {text}", file=sys.stderr)
        return EXIT_ERROR
