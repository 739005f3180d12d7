"""A griffe extension for the API reference: the doctests in docstrings shown as code.

A docstring's ``>>>`` lines and the output under them (up to a blank line) are fenced as a
``pycon`` block, so that Markdown reads them as code rather than as quotes or links. Only the
rendered text changes: the docstrings in ``src/`` (and the doctests ``pytest`` runs) do not.
"""

from __future__ import annotations

from typing import Any

import griffe


def fenced(text: str) -> str:
    """``text`` with each run of doctest lines (a ``>>>`` line to the next blank line) fenced."""
    lines, out, inside = text.splitlines(), [], False
    for line in lines:
        prompt = line.lstrip().startswith(">>>")
        if prompt and not inside:
            out.append("```pycon")
            inside = True
        elif inside and not line.strip():
            out.append("```")
            inside = False
        out.append(line)
    if inside:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fence the doctests of every object's docstring once it has been read."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fenced(obj.docstring.value)
