"""A MkDocs hook: the site's home page is the README, its links to ``docs/`` made site links.

So the README stays the one front page, on GitHub and in the site (``docs/index.md`` only holds
its place in the navigation).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def on_page_read_source(page: Any, config: Any) -> str | None:
    if page.file.src_uri != "index.md":
        return None
    return re.sub(r"\]\(docs/", "](", README.read_text(encoding="utf-8"))
