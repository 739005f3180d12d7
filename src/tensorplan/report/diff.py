"""What a model change cost in memory: two plans compared, storage by storage.

A storage is known by its first value's name (the value that defines it; ``storage <id>`` when it
has none), so the same layer matches across two compiles even when storage ids move. Names are
torch.export's node names, made from the op (``addmm_1``), so two unrelated models share a few
(``x``, ``addmm``): when fewer than ``RELATED_SHARE`` of the value names are in both plans, the
report says the programs share no structure. A plan is read from a saved program
(``Program.save``, ``tensorplan plan --save``) or a plan JSON file (``tensorplan plan --json``);
anything else raises ``FormatError`` saying what the file is and what to give instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tensorplan.errors import FormatError
from tensorplan.formats.artifact import is_artifact, read_plan
from tensorplan.formats.encoding import Fields, decode_plan, parse_json
from tensorplan.frontend.pt2 import file_format
from tensorplan.plan.plan import MemoryPlan, PlannedStorage
from tensorplan.report.text import bytes_text

CHANGES = ("grew", "shrank", "appeared", "vanished")  # the sections, in the order printed
RELATED_SHARE = 0.25  # two versions of one model have at least this share of value names in
#                       common (a model against itself with other options: all of them;
#                       unrelated zoo models: 2 to 11 %)
GIVE = ("give diff programs saved with `tensorplan plan TARGET --save F.tplan` or plans "
        "written with `tensorplan plan TARGET --json F.json`")


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
    shared_values: int                    # value names the storages of both plans hold
    all_values: int                       # value names the storages of either plan hold

    @property
    def shared(self) -> float:
        """The share of value names in both plans (1.0 when neither holds any)."""
        return self.shared_values / self.all_values if self.all_values else 1.0


def storage_name(storage: PlannedStorage) -> str:
    """The name a storage is matched by: its first value, or ``storage <id>``."""
    return storage.values[0] if storage.values else f"storage {storage.id}"


def held_values(plan: MemoryPlan) -> frozenset[str]:
    """The names of every value the plan's storages hold (values reused into another's storage
    too; constants hold none)."""
    return frozenset(value for storage in plan.storages.values() for value in storage.values)


def diff_plans(old: MemoryPlan, new: MemoryPlan) -> PlanDiff:
    """The storages that grew, shrank, appeared or vanished between ``old`` and ``new``, and
    how many value names the two plans share.

    >>> a = PlannedStorage(0, 0, 64, 0, 2, "input", "", ("x",))
    >>> b = PlannedStorage(1, 64, 32, 1, 3, "activation", "", ("relu",))
    >>> before = MemoryPlan(96, 96, "greedy", 16, True, {0: a, 1: b}, ())
    >>> after = MemoryPlan(64, 64, "greedy", 16, True, {0: a}, ())
    >>> diff_plans(before, after).changes
    (StorageChange(name='relu', old=32, new=None),)
    >>> diff_plans(before, after).shared
    0.5
    """
    sizes_old = {storage_name(s): s.size for s in old.storages.values()}
    sizes_new = {storage_name(s): s.size for s in new.storages.values()}
    changes = [StorageChange(name, sizes_old.get(name), sizes_new.get(name))
               for name in sizes_old.keys() | sizes_new.keys()
               if sizes_old.get(name) != sizes_new.get(name)]
    changes.sort(key=lambda c: (-abs(c.delta), c.name))
    values_old, values_new = held_values(old), held_values(new)
    return PlanDiff(old, new, tuple(changes), len(values_old & values_new),
                    len(values_old | values_new))


def structure_warning(diff: PlanDiff) -> str | None:
    """A warning when fewer than ``RELATED_SHARE`` of the value names are in both plans: the
    programs share no structure, and storages matched by name pair values that only share a
    name. None when they look like two versions of one model."""
    if diff.shared >= RELATED_SHARE:
        return None
    return (f"warning: the two programs share no structure: {diff.shared_values} of "
            f"{diff.all_values} value names ({diff.shared:.0%}) are in both plans, where two "
            f"versions of one model share at least {RELATED_SHARE:.0%}; storages are matched "
            f"by name, so a row below may pair values of different models")


def read_plan_file(path: str | os.PathLike[str]) -> MemoryPlan:
    """The plan a saved program or a plan JSON file holds, verified.

    Raises ``FormatError`` for a missing file, a file that holds no tensorplan plan (saying
    what it is: a torch.export program, an ExecuTorch ``.pte``, another zip archive, JSON of
    another kind, bytes of no known format) and what to give instead, or a plan that is
    malformed or invalid.
    """
    where = os.fspath(path)
    if not os.path.isfile(where):
        raise FormatError(f"{where}: no such file")
    if is_artifact(where):
        return decode_plan(read_plan(where))
    with open(where, "rb") as handle:
        data = handle.read()
    kind = file_format(data)
    if kind != "json":
        raise FormatError(f"{where}: {_not_a_plan(kind, where)}")
    return decode_plan(_plan_document(data, where))


def _not_a_plan(kind: str | None, where: str) -> str:
    """What a file of ``kind`` (``file_format``'s) is, and what diff takes instead."""
    if kind == "pt2":
        return (f"a torch.export program holds no plan yet; plan it with "
                f"`tensorplan plan {where} --save F.tplan` and compare that")
    if kind == "pte":
        return ("an ExecuTorch program (.pte), not a tensorplan plan; plan the model or the .pt2 "
                "it was lowered from with `tensorplan plan TARGET --save F.tplan` and compare "
                "that")
    if kind == "zip":
        return (f"a zip archive that is neither a tensorplan program nor a torch.export program "
                f"(a torch.save checkpoint?); {GIVE}")
    return f"neither a tensorplan program nor JSON (a format tensorplan does not know); {GIVE}"


def _plan_document(data: bytes, where: str) -> Fields:
    """The JSON ``data`` as a plan document; JSON without a ``schema`` is not a plan."""
    document = parse_json(data, where)
    if not isinstance(document, dict) or "schema" not in document:
        raise FormatError(f"{where}: JSON but not a tensorplan plan (it has no \"schema\": "
                          f"\"tensorplan.plan\"); {GIVE}")
    return Fields(document, where)


def _signed(delta: int) -> str:
    """``+1,024 B (1.0 KiB)`` or ``-80 B``."""
    return f"{'+' if delta >= 0 else '-'}{bytes_text(abs(delta))}"


def _change(old: int, new: int) -> str:
    share = f" ({100 * (new - old) / old:+.1f} %)" if old else ""
    return _signed(new - old) + share


def _byte_rows(old: MemoryPlan, new: MemoryPlan) -> list[tuple[str, int, int]]:
    """The byte counts compared, as (label, old, new): arena, bound, the constants the runs
    read, and the constants before folding when folding changed them in either plan."""
    rows = [("arena", old.arena_bytes, new.arena_bytes),
            ("lower bound", old.lower_bound_bytes, new.lower_bound_bytes),
            ("constants", old.constant_bytes, new.constant_bytes)]
    if (old.baseline_constant_bytes, new.baseline_constant_bytes) != rows[-1][1:]:
        rows.append(("constants before folding", old.baseline_constant_bytes,
                     new.baseline_constant_bytes))
    return rows


def _numbers(diff: PlanDiff) -> Table:
    table = Table(title="Memory plan", show_header=True)
    for column in ("", "old", "new", "change"):
        table.add_column(column, justify="left" if not column else "right")
    for label, old, new in _byte_rows(diff.old, diff.new):
        table.add_row(label, bytes_text(old), bytes_text(new), _change(old, new))
    table.add_row("storages", str(len(diff.old.storages)), str(len(diff.new.storages)),
                  f"{len(diff.new.storages) - len(diff.old.storages):+d}")
    table.add_row("algorithm", diff.old.algorithm, diff.new.algorithm, "")
    return table


def _rest(hidden: list[StorageChange]) -> str | None:
    """The line under a section for the changes not shown: how many and their bytes."""
    if not hidden:
        return None
    return f"and {len(hidden)} more, {_signed(sum(c.delta for c in hidden))} in all"


def _section(kind: str, changes: list[StorageChange], top: int) -> Table:
    """The ``top`` largest ``changes`` of one kind, the rest summed in the caption."""
    table = Table(title=f"{len(changes)} storage{'s' if len(changes) != 1 else ''} {kind}",
                  caption=_rest(changes[top:]))
    table.add_column("value", overflow="fold")
    for column in ("old", "new", "change"):
        table.add_column(column, justify="right")
    for c in changes[:top]:
        table.add_row(Text(c.name), "-" if c.old is None else bytes_text(c.old),
                      "-" if c.new is None else bytes_text(c.new),
                      _signed(c.delta))
    return table


def diff_report(diff: PlanDiff, top: int = 10) -> Group:
    """The structure warning if any (``structure_warning``), the numbers side by side, then one
    table per kind of change with its ``top`` largest changes (none: a line saying so)."""
    warning = structure_warning(diff)
    head = [Text(warning, style="yellow"), _numbers(diff)] if warning else [_numbers(diff)]
    sections = [_section(kind, [c for c in diff.changes if c.kind == kind], top)
                for kind in CHANGES if any(c.kind == kind for c in diff.changes)]
    return Group(*head, *(sections or [Text("No storage changed size.")]))
