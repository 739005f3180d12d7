"""The user's names for a program's dynamic dims, and texts that use them.

torch.export gives every dynamic dim a ShapeEnv symbol (``s27``) and remembers the ``Dim``
name the user wrote (``seq``) only in the ShapeEnv of the trace it made. Every text tensorplan
prints goes through ``named`` so that it says ``seq`` wherever the name is known; a program
loaded from a file keeps the names when the file recorded them (``record_dim_names``), and
falls back to the symbol otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torch.export import ExportedProgram

from tensorplan.frontend.fake import program_shape_env

DimNames = Mapping[str, str]  # ShapeEnv symbol (its canonical root) -> the user's Dim name

RECORD_MEMBER = "tensorplan_dim_names.json"  # the extra file of a .pt2 tensorplan writes
_META_KEY = "tensorplan_dim_names"           # where a loaded program keeps the names read


def _traced_names(shape_env: Any) -> dict[str, set[str]]:
    """Each canonical symbol's Dim names, read from the ShapeEnv's sources (a symbol that is
    no canonical root, such as the size ``2*n``, gives none)."""
    debug = getattr(shape_env, "source_name_to_debug_name", {}) or {}
    found: dict[str, set[str]] = {}
    for symbol, sources in getattr(shape_env, "var_to_sources", {}).items():
        root = shape_env.replace(symbol)
        for source in sources:
            # a dim of an input has the name in the debug table; the root of a derived dim
            # (2 * Dim("n")) is a constant source named "n"
            name = debug.get(source.name) or getattr(source, "source_name", None)
            if name and getattr(root, "is_Symbol", False):
                found.setdefault(str(root), set()).add(name)
    return found


def dim_names(program: ExportedProgram) -> dict[str, str]:
    """The Dim name of each dynamic dim's symbol in ``program``: from the ShapeEnv of its
    trace, else from what a loaded file recorded. A symbol with no name, with two names, or
    whose name another symbol shares or that is no identifier is left out (it prints as
    itself)."""
    _, shape_env = program_shape_env(program)
    found = _traced_names(shape_env) if shape_env is not None else {}
    recorded = program.graph_module.meta.get(_META_KEY, {})
    for symbol, name in recorded.items():
        found.setdefault(symbol, {name})
    chosen = {symbol: next(iter(names)) for symbol, names in found.items() if len(names) == 1}
    taken = list(chosen.values())
    return {symbol: name for symbol, name in sorted(chosen.items())
            if taken.count(name) == 1 and name.isidentifier()}


def record_dim_names(program: ExportedProgram, names: DimNames) -> None:
    """Keep ``names`` (read from a file) with ``program``, for ``dim_names`` to find."""
    program.graph_module.meta[_META_KEY] = dict(names)


def named(text: object, names: DimNames) -> str:
    """``text`` (a size, an expression or a message) with each symbol written by its name.

    >>> named("2*s27 + 1", {"s27": "seq"}), named("s270", {"s27": "seq"})
    ('2*seq + 1', 's270')
    """
    text = str(text)
    if not names:
        return text
    pattern = r"\b(" + "|".join(map(re.escape, names)) + r")\b"
    return re.sub(pattern, lambda match: names[match.group(1)], text)
