"""What a model change cost in memory: two plans compared, storage by storage.

A storage is known by its first value's name (the value that defines it; ``storage <id>`` when it
has none), so the same layer matches across two compiles even when storage ids move. A plan is
read from a saved program (``Program.save``, ``tensorplan plan --save``) or a plan JSON file
(``tensorplan plan --json``); anything else raises ``FormatError`` naming the file.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tensorplan.errors import FormatError
from tensorplan.formats.artifact import is_artifact, read_plan
from tensorplan.formats.encoding import Fields, decode_plan, parse_json
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.report.text import bytes_text

CHANGES = ("grew", "shrank", "appeared", "vanished")  # the sections, in the order printed


@dataclass(frozen=True)
class StorageChange:
    """One storage whose size differs between the two plans."""

    name: str          # its first value's name
    old: int | None    # bytes in the old plan; None when it appeared
    new: int | None    # bytes in the new plan; None when it vanished

    @property
    def kind(self) -> str:
        """``grew``, ``shrank``, ``appeared`` or ``vanished``."""
        if self.old is None:
            return "appeared"
        if self.new is None:
            return "vanished"
        return "grew" if self.new > self.old else "shrank"

    @property
    def delta(self) -> int:
        """New bytes minus old bytes (a missing side counts as 0)."""
        return (self.new or 0) - (self.old or 0)


@dataclass(frozen=True)
class PlanDiff:
    """Two plans and the storages that changed size, largest change first."""

    old: MemoryPlan                       # the plan before
    new: MemoryPlan                       # the plan after
    changes: tuple[StorageChange, ...]    # storages of another size, by |delta|, then name


def storage_name(storage: PlannedStorage) -> str:
    """The name a storage is matched by: its first value, or ``storage <id>``."""
    return storage.values[0] if storage.values else f"storage {storage.id}"


def diff_plans(old: MemoryPlan, new: MemoryPlan) -> PlanDiff:
    """The storages that grew, shrank, appeared or vanished between ``old`` and ``new``.

    >>> a = PlannedStorage(0, 0, 64, 0, 2, "input", "", ("x",))
    >>> b = PlannedStorage(1, 64, 32, 1, 3, "activation", "", ("relu",))
    >>> before = MemoryPlan(96, 96, "greedy", 16, True, {0: a, 1: b}, ())
    >>> after = MemoryPlan(64, 64, "greedy", 16, True, {0: a}, ())
    >>> diff_plans(before, after).changes
    (StorageChange(name='relu', old=32, new=None),)
    """
    sizes_old = {storage_name(s): s.size for s in old.storages.values()}
    sizes_new = {storage_name(s): s.size for s in new.storages.values()}
    changes = [StorageChange(name, sizes_old.get(name), sizes_new.get(name))
               for name in sizes_old.keys() | sizes_new.keys()
               if sizes_old.get(name) != sizes_new.get(name)]
    changes.sort(key=lambda c: (-abs(c.delta), c.name))
    return PlanDiff(old, new, tuple(changes))


def read_plan_file(path: str | os.PathLike[str]) -> MemoryPlan:
    """The plan a saved program or a plan JSON file holds, verified.

    Raises ``FormatError`` for a missing file, a torch.export program (it holds no plan yet),
    a file that is neither, or a plan that is malformed or invalid.
    """
    where = os.fspath(path)
    if not os.path.isfile(where):
        raise FormatError(f"{where}: no such file")
    if is_artifact(where):
        return decode_plan(read_plan(where))
    if zipfile.is_zipfile(where):
        raise FormatError(f"{where}: a torch.export program holds no plan yet; plan it with "
                          f"`tensorplan plan {where} --save F.tplan` and compare that")
    with open(where, "rb") as handle:
        document = parse_json(handle.read(), where)
    return decode_plan(Fields(document, where))


def _signed(delta: int) -> str:
    """``+1,024 B (1.0 KiB)`` or ``-80 B``."""
    return f"{'+' if delta >= 0 else '-'}{bytes_text(abs(delta))}"


def _change(old: int, new: int) -> str:
    share = f" ({100 * (new - old) / old:+.1f} %)" if old else ""
    return _signed(new - old) + share


def _numbers(diff: PlanDiff) -> Table:
    table = Table(title="Memory plan", show_header=True)
    for column in ("", "old", "new", "change"):
        table.add_column(column, justify="left" if not column else "right")
    for label, old, new in (("arena", diff.old.arena_bytes, diff.new.arena_bytes),
                            ("lower bound", diff.old.lower_bound_bytes,
                             diff.new.lower_bound_bytes)):
        table.add_row(label, bytes_text(old), bytes_text(new), _change(old, new))
    table.add_row("storages", str(len(diff.old.storages)), str(len(diff.new.storages)),
                  f"{len(diff.new.storages) - len(diff.old.storages):+d}")
    table.add_row("algorithm", diff.old.algorithm, diff.new.algorithm, "")
    return table


def _section(kind: str, changes: list[StorageChange]) -> Table:
    table = Table(title=f"{len(changes)} storage{'s' if len(changes) != 1 else ''} {kind}")
    table.add_column("value", overflow="fold")
    for column in ("old", "new", "change"):
        table.add_column(column, justify="right")
    for c in changes:
        table.add_row(Text(c.name), "-" if c.old is None else bytes_text(c.old),
                      "-" if c.new is None else bytes_text(c.new),
                      _signed(c.delta))
    return table


def diff_report(diff: PlanDiff) -> Group:
    """The numbers side by side, then one table per kind of change (none: a line saying so)."""
    sections = [_section(kind, [c for c in diff.changes if c.kind == kind]) for kind in CHANGES
                if any(c.kind == kind for c in diff.changes)]
    if not sections:
        return Group(_numbers(diff), Text("No storage changed size."))
    return Group(_numbers(diff), *sections)
