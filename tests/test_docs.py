"""The documentation site: `make docs`'s strict build, the API reference and the README's links.

The site is built the way `make docs` builds it (`mkdocs build --strict`: any warning, such as a
broken link or a docstring mkdocstrings cannot read, fails), into a temporary folder.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tensorplan
import tensorplan.errors as errors
import tensorplan.integrations.executorch as executorch_integration

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def _anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))


@pytest.mark.parametrize(("module", "page"), [
    (tensorplan, "tensorplan"),
    (executorch_integration, "executorch"),
])
def test_reference_has_every_public_name(site: Path, module, page: str) -> None:
    anchors = _anchors(site / "reference" / page / "index.html")
    missing = [name for name in module.__all__ if f"{module.__name__}.{name}" not in anchors]
    assert not missing, f"not in the API reference of {module.__name__}: {missing}"


def test_every_guide_is_built(site: Path) -> None:
    for guide in (ROOT / "docs").rglob("*.md"):
        page = guide.relative_to(ROOT / "docs").with_suffix("")
        built = site / ("index.html" if page.name == "index" else page / "index.html")
        assert built.is_file(), f"{guide} is not in the site"


def test_readme_is_short_and_links_every_guide() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "make demo" in text and "make test" in text
    linked = set(re.findall(r"\]\(([^)#]+)", text))
    assert "docs/ARCHITECTURE.md" in linked
    pages = [p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")
             if p.parent.name != "reference" and p.name != "index.md"]
    assert not [p for p in pages if p not in linked], "guides the README does not link"
    for link in linked:
        if not re.match(r"[a-z]+://", link):
            assert (ROOT / link).exists(), f"README links to a missing file: {link}"


def test_docs_tools_pinned_alike() -> None:
    """The Makefile's `make docs` installs the same versions as pyproject's `dev` extra."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {re.split(r"[\[=]", r)[0]: r for r in dev["dev"] if "==" in r}
    make = (ROOT / "Makefile").read_text()
    tools = re.search(r"^DOCS_TOOLS := (.*)$", make, re.M).group(1).split()
    assert sorted(tools) == sorted(pins[re.split(r"[\[=]", t)[0]] for t in tools)


def test_troubleshooting_has_a_section_for_every_error() -> None:
    """A new error type without its entry in the troubleshooting guide fails here."""
    defined = [name for name, kind in inspect.getmembers(errors, inspect.isclass)
               if issubclass(kind, BaseException) and kind.__module__ == errors.__name__]
    text = (ROOT / "docs" / "guides" / "troubleshooting.md").read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)  # no code comments
    headings = " ".join(re.findall(r"^#+ (.*)$", prose, re.MULTILINE))
    missing = [name for name in defined if not re.search(rf"\b{name}\b", headings)]
    assert len(defined) >= 10
    assert not missing, f"error types with no heading in troubleshooting.md: {missing}"


_FIGURE = re.compile(r"(\d[\d,]*(?:\.\d+)?)(?:–(\d[\d,]*(?:\.\d+)?))?(x| B| kB)")


def _results_sections() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from run_all import sections

    return sections((ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"))


def _prose(body: str) -> str:
    """A section's text outside its tables: its summary and notes."""
    return "\n".join(line for line in body.splitlines() if not line.startswith("|"))


def test_every_figure_of_the_readme_performance_table_is_in_its_results_section() -> None:
    """Each row of the README's table names its RESULTS.md sections (their headings before the
    colon); every ratio and byte count the row quotes is written in one of them, and every
    figure it sets in bold (the headline) in their summaries and notes, not only in a table
    cell."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| what (`benchmarks/RESULTS.md` section)"):text.index("## Guides")]
    sections = _results_sections()
    rows = [row.strip().strip("|").split("|") for row in table.splitlines()[2:] if row.strip()]
    assert len(rows) >= 8
    for what, figures, *_ in rows:
        named = [body for head, body in sections.items() if head.split(":")[0] in what]
        assert named, f"README row {what.strip()!r} names no RESULTS.md section"
        quoted = [(m.group(1), m.group(3)) for m in _FIGURE.finditer(figures)]
        quoted += [(m.group(2), m.group(3)) for m in _FIGURE.finditer(figures) if m.group(2)]
        assert quoted, f"README row {what.strip()!r} quotes no figure"
        for number, unit in quoted:
            written = (f"{number}x",) if unit == "x" else (number, number.replace(",", ""))
            assert any(w in body for w in written for body in named), \
                f"README row {what.strip()!r}: {number}{unit} is not in its RESULTS.md section"
        for bold in re.findall(r"\*\*([^*]+)\*\*", figures):
            number = _FIGURE.search(bold)
            assert number is not None, f"README row {what.strip()!r}: bold {bold!r} is no figure"
            written = number.group(1) + ("x" if number.group(3) == "x" else "")
            assert any(written in _prose(body) for body in named), \
                f"README row {what.strip()!r}: {bold} is not in its sections' summaries or notes"
