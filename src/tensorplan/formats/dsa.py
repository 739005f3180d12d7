"""Read and write dynamic-storage-allocation instances: CSV files ``id,lower,upper,size``.

Row ``id,lower,upper,size`` is one buffer of ``size`` bytes live in ``[lower, upper)``. Other
columns (IREE's ``offset``, say) are kept as read, for reference and for writing back.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tensorplan.errors import FormatError, TensorPlanError
from tensorplan.plan.planners import Buffer, Placement, Problem

REQUIRED = ("id", "lower", "upper", "size")  # columns every instance must have


@dataclass(frozen=True)
class DsaInstance:
    """One instance file: its buffers in file order, their ids, and the rows as read."""

    path: Path  # the file it was read from
    ids: tuple[str, ...]  # the ``id`` column, per buffer
    problem: Problem  # the buffers, ``buffers[i]`` from data row i
    columns: tuple[str, ...]  # the header, as in the file
    rows: tuple[tuple[str, ...], ...]  # every data row, as text

    def column(self, name: str) -> tuple[int, ...] | None:
        """An extra integer column (e.g. IREE's ``offset``), or None when the file lacks it."""
        if name not in self.columns:
            return None
        at = self.columns.index(name)
        try:
            return tuple(int(row[at]) for row in self.rows)
        except ValueError:
            raise FormatError(f"{self.path}: column {name!r} is not all integers") from None


def _buffer(path: Path, line: int, values: dict[str, str]) -> Buffer:
    """The buffer of one row; FormatError naming the file and line when it is not one."""
    try:
        numbers = {name: int(values[name]) for name in ("size", "lower", "upper")}
    except (TypeError, ValueError):
        shown = ",".join(str(values[name]) for name in REQUIRED)
        message = f"{path}:{line}: expected integers for lower, upper, size; got {shown!r}"
        raise FormatError(message) from None
    try:
        return Buffer(numbers["size"], numbers["lower"], numbers["upper"])
    except TensorPlanError as error:
        raise FormatError(f"{path}:{line}: {error}") from None


def load_instance(path: str | Path) -> DsaInstance:
    """Read an instance; a missing column or a malformed row raises FormatError with its line.

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    ...     _ = f.write("id,lower,upper,size\\n7,0,2,64\\n8,1,3,32\\n")
    >>> inst = load_instance(f.name); os.unlink(f.name)
    >>> inst.ids, inst.problem.buffers[1]
    (('7', '8'), Buffer(size=32, start=1, end=3))
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            table = list(csv.reader(handle))
    except OSError as error:
        raise FormatError(f"cannot read instance {path}: {error.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as error:
        raise FormatError(f"{path}: not a UTF-8 CSV file ({error})") from None
    if not table:
        raise FormatError(f"{path}: empty file, expected a header {','.join(REQUIRED)}")
    columns = tuple(name.strip() for name in table[0])
    missing = [name for name in REQUIRED if name not in columns]
    if missing:
        raise FormatError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        raise FormatError(f"{path}:1: column(s) {', '.join(repeated)} appear more than once")
    ids, buffers, rows = [], [], []
    first_line: dict[str, int] = {}
    for line, row in enumerate(table[1:], start=2):
        if not row:
            continue
        if len(row) != len(columns):
            raise FormatError(f"{path}:{line}: {len(row)} fields, the header has {len(columns)}")
        values = dict(zip(columns, (field.strip() for field in row), strict=True))
        if first_line.setdefault(values["id"], line) != line:
            raise FormatError(f"{path}:{line}: id {values['id']!r} is already used on line "
                              f"{first_line[values['id']]}; ids must be unique")
        buffers.append(_buffer(path, line, values))
        ids.append(values["id"])
        rows.append(tuple(row))
    return DsaInstance(path, tuple(ids), Problem(tuple(buffers)), columns, tuple(rows))


def write_solution(path: str | Path, instance: DsaInstance, placement: Placement) -> None:
    """Write the instance's rows with an ``offset`` column holding the placement's offsets.

    An ``offset`` column already in the input is replaced; every other column is kept.
    """
    if len(placement.offsets) != len(instance.rows):
        raise FormatError(
            f"placement has {len(placement.offsets)} offsets for {len(instance.rows)} rows"
        )
    keep = [at for at, name in enumerate(instance.columns) if name != "offset"]
    try:
        with Path(path).open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow([instance.columns[at] for at in keep] + ["offset"])
            for row, offset in zip(instance.rows, placement.offsets, strict=True):
                writer.writerow([row[at] for at in keep] + [offset])
    except OSError as error:
        raise FormatError(f"cannot write solution {path}: {error.strerror}") from None
