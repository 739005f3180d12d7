"""The guides a user follows start to finish: every ``python`` code block of each page run in
order, in one namespace, in a folder of its own, as a reader pasting them would.

A block that fails fails the test with the guide's name and the block's first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "guides"
RUN = ["llm.md", "cortex-m.md"]  # the guides whose every block runs as written
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(guide: str) -> list[str]:
    """The ``python`` code blocks of a guide, in order."""
    return BLOCK.findall((GUIDES / guide).read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("guide", RUN)
def test_every_block_of_the_guide_runs(guide: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("executorch")
    monkeypatch.chdir(tmp_path)
    found = blocks(guide)
    assert len(found) >= 4
    namespace: dict[str, object] = {"__name__": f"guide_{guide}"}
    for number, code in enumerate(found, 1):
        first = code.splitlines()[0]
        try:
            exec(compile(code, f"{guide} block {number}", "exec"), namespace)  # noqa: S102
        except Exception as error:
            raise AssertionError(f"{guide}, block {number} ({first!r}): {error}") from error
