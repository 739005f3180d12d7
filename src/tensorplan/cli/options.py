"""What the commands share: the options they parse, the console they print to, how they write
files. Torch-free, so that building the parser imports nothing heavy; what a value stands for
(a ``Bank``, the compile options) is made when a command runs.

Worked example: ``--bank sram=256KiB --bank dram`` parses to ``[("sram", 262144, None),
("dram", None, None)]``, which ``banks`` turns into ``Bank("sram", 262144, 1.0)`` and
``Bank("dram", None, 10.0)``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tensorplan.errors import InputError, TensorPlanError

if TYPE_CHECKING:
    from tensorplan.banks.choice import Bank

# What a TARGET may be: the help of every command that takes one, and its errors.
FORMS = ("zoo:NAME, package.module:factory, path/to/file.py:factory, a .pt2 file "
         "(torch.export.save), or a program saved with --save (.tplan)")
WIDE = 160  # console width when stdout is not a terminal (files, pipes, tests)
BANK_COST_STEP = 10.0  # a bank given without @COST costs this much more than the one before

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def console() -> Console:
    """The console commands print to: the terminal's width, or ``WIDE`` for files and pipes."""
    return Console() if sys.stdout.isatty() else Console(width=WIDE)


def parse_bytes(text: str) -> int:
    """A byte count written as an integer with an optional unit (B, KB, MB, GB in powers of
    1000; KiB, MiB, GiB in powers of 1024; case does not matter).

    >>> parse_bytes("256KiB"), parse_bytes("1.5 MB"), parse_bytes("4096")
    (262144, 1500000, 4096)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InputError(f"{text!r} is not a byte count: write e.g. 262144, 256KiB or 1.5MB")
    return int(float(match.group(1)) * _UNITS[unit])


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def byte_count(text: str) -> int:
    """An ``argparse`` type: a byte count (``parse_bytes``)."""
    try:
        return parse_bytes(text)
    except TensorPlanError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def sizes(text: str) -> dict[str, int]:
    """``DIM=N[,DIM=N]``: sizes of dynamic dims by name.

    >>> sizes("seq=16, batch=2")
    {'seq': 16, 'batch': 2}
    """
    given = {}
    for part in text.split(","):
        dim, equals, size = part.partition("=")
        if not (dim and equals and size.isdigit()):
            raise argparse.ArgumentTypeError(f"expected DIM=N[,DIM=N] such as seq=16, got {text}")
        given[dim.strip()] = int(size)
    return given


def at_title(given: dict[str, int]) -> str:
    """``at batch=2, seq=16``: how a plan at ``--at`` sizes is titled."""
    return "at " + ", ".join(f"{dim}={size}" for dim, size in sorted(given.items()))


def patches(text: str) -> str | tuple[int, int]:
    """``auto`` or a grid ``RxC`` (``4x4``)."""
    if text == "auto":
        return text
    rows, x, cols = text.partition("x")
    if not (x and rows.isdigit() and cols.isdigit() and int(rows) >= 1 and int(cols) >= 1):
        raise argparse.ArgumentTypeError(f"expected auto or ROWSxCOLS such as 4x4, got {text}")
    return int(rows), int(cols)


def chunks(text: str) -> str | int:
    """``auto`` or a positive number of chunks."""
    if text == "auto":
        return text
    if not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"expected auto or a positive number of chunks such "
                                         f"as 8, got {text}")
    return int(text)


def add_top(parser: argparse.ArgumentParser, rows: str) -> None:
    """``--top N``: how many ``rows`` a table shows, largest first (default 10); the rest are
    summed in one line under it."""
    parser.add_argument("--top", type=positive_int, default=10, metavar="N",
                        help=f"show the N largest {rows} (default 10); the rest are summed "
                             "in one line")


def add_threads(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: the intra-op threads torch runs with while timing (default 1)."""
    parser.add_argument("--threads", type=positive_int, default=1, metavar="N",
                        help="threads torch runs the timed runs with (default 1: the figures "
                             "do not depend on what else the machine runs)")


def set_threads(count: int) -> str:
    """Make torch run its kernels on ``count`` threads; returns the words that say so."""
    import torch

    torch.set_num_threads(count)
    return f"{count} thread" + ("s" if count > 1 else "")


def target_command(commands: argparse._SubParsersAction, name: str,
                   summary: str) -> argparse.ArgumentParser:
    """A subcommand that takes one TARGET (zoo:NAME, module:factory or a file)."""
    parser = commands.add_parser(name, help=summary)
    parser.add_argument("target", help=FORMS)
    return parser


def add_switches(parser: argparse.ArgumentParser, switches: tuple[tuple[str, str], ...],
                 verb: str) -> None:
    """``--no-NAME`` for each ``(name, what)``: stores False in ``NAME`` ("VERB without WHAT")."""
    for switch, what in switches:
        parser.add_argument(f"--no-{switch}", dest=switch, action="store_false",
                            help=f"{verb} without {what}")


def add_bank_options(parser: argparse.ArgumentParser) -> None:
    """``--bank`` (repeated, fastest first) and ``--pin``."""
    parser.add_argument(
        "--bank",
        type=_bank,
        action="append",
        default=None,
        metavar="NAME[=CAPACITY][@COST]",
        help="a memory bank, fastest first, repeated (sram=256KiB dram): each bank's cost "
             "defaults to 10x the one before's, its capacity to unbounded",
    )
    parser.add_argument("--pin", type=_pin, action="append", default=[], metavar="VALUE=BANK",
                        help="keep a value (input, output, state, constant) in a bank")


def add_constants_bank(parser: argparse.ArgumentParser) -> None:
    """``--constants-bank``: the bank the constants are read from (``constants_bank=``)."""
    parser.add_argument("--constants-bank", default=None, metavar="BANK",
                        help="with --bank: the bank the constants are read from, whose "
                             "capacity they take (default: the last, slowest)")


def _bank(text: str) -> tuple[str, int | None, float | None]:
    """``NAME[=CAPACITY][@COST]``: a bank's name, capacity (None: unbounded), cost (None: the
    default)."""
    match = re.fullmatch(r"([A-Za-z_][\w.-]*)(?:=([^@]+))?(?:@([0-9.]+))?", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected NAME[=CAPACITY][@COST] such as "
                                         f"sram=256KiB@1 or dram, got {text}")
    capacity = byte_count(match.group(2)) if match.group(2) else None
    return match.group(1), capacity, float(match.group(3)) if match.group(3) else None


def _pin(text: str) -> tuple[str, str]:
    value, equals, bank = text.partition("=")
    if not (value and equals and bank):
        raise argparse.ArgumentTypeError(f"expected VALUE=BANK such as b_k_cache=dram, got {text}")
    return value, bank


def banks(given: list[tuple[str, int | None, float | None]] | None) -> tuple[Bank, ...] | None:
    """The ``--bank`` options as ``Bank``s, fastest first (None when none was given)."""
    from tensorplan.banks.choice import Bank

    if not given:
        return None
    made, cost = [], 1.0
    for name, capacity, price in given:
        cost = price if price is not None else (cost * BANK_COST_STEP if made else 1.0)
        made.append(Bank(name, capacity, cost))
    return tuple(made)


def write(path: str, what: str, writer: Callable[[str], Any]) -> None:
    """``writer(path)``, then say so; a file that cannot be written becomes one
    ``TensorPlanError`` line."""
    try:
        writer(path)
    except (OSError, ValueError) as error:  # ValueError: an image format unknown
        message = error.strerror if isinstance(error, OSError) else None
        raise TensorPlanError(f"cannot write {path}: {message or error}") from None
    print(f"wrote {what} to {path}")


def write_text(path: str, text: str) -> None:
    """``text`` into the file ``path`` (UTF-8)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_bytes(path: str, data: bytes) -> None:
    """``data`` into the file ``path``."""
    with open(path, "wb") as handle:
        handle.write(data)
