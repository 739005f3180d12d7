"""The package's import graph: no cycles among tensorplan modules, and every module imports alone.

The graph is read from the source with ``ast``: every ``import`` statement counts, at module level
or inside a function (a function-level import is a cycle postponed, not removed). Importing
``tensorplan.a.b`` also runs the package ``tensorplan.a``, so that package is an edge too, unless
it is one of the importer's own packages (those have started before the importer runs).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tensorplan

SOURCE = Path(tensorplan.__file__).parent
ROOT = "tensorplan"


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    names = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = (ROOT, *path.relative_to(SOURCE).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _packages(name: str) -> list[str]:
    """The packages enclosing ``name``, outermost first: a.b.c -> [a, a.b]."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool,
             modules: dict[str, Path]) -> list[str]:
    """The tensorplan modules one import statement names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == ROOT]
    if node.level:
        package = importer if is_package else importer.rpartition(".")[0]
        base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*base_parts, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    if base.split(".")[0] != ROOT:
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
            for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """Module -> the tensorplan modules it imports (and the packages those imports run)."""
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        own = set(_packages(name))
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(node, name, path.name == "__init__.py", modules):
                    edges |= {t for t in (*_packages(target), target) if t in modules}
        graph[name] = edges - own - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None when it is acyclic.

    >>> find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}})
    ['a', 'b', 'c', 'a']
    >>> find_cycle({"a": {"b"}, "b": set()}) is None
    True
    """
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == "open":
                return path[path.index(succ):] + [succ]
            if succ not in state and (cycle := visit(succ)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_checker_sees_function_level_and_package_imports() -> None:
    graph = import_graph()
    assert "tensorplan.analysis.alias" in graph["tensorplan.analysis.liveness"]
    assert "tensorplan.zoo.models" in graph["tensorplan.zoo"]         # inside a function
    assert "tensorplan.report" in graph["tensorplan.cli.plan"]        # a package's __init__
    assert "tensorplan.report.text" in graph["tensorplan.report.tables"]
    assert "tensorplan" not in graph["tensorplan.program"]            # its own package


def test_the_checker_resolves_relative_imports() -> None:
    statement = ast.parse("from ..errors import PlanError").body[0]
    assert _targets(statement, "tensorplan.plan.budget", False, module_names()) == [
        "tensorplan.errors"]
    statement = ast.parse("from . import budget").body[0]
    assert _targets(statement, "tensorplan.plan", True, module_names()) == [
        "tensorplan.plan.budget"]


def test_no_import_cycle_among_tensorplan_modules() -> None:
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()) or ())


FRESH_IMPORTS = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "tensorplan" or m.startswith("tensorplan.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as error:
        failed.append(f"{name}: {type(error).__name__}: {error}")
print("\\n".join(failed))
"""


def test_every_module_imports_on_its_own() -> None:
    """Each module imported first, into an interpreter holding no tensorplan module yet."""
    names = sorted(module_names())
    done = subprocess.run([sys.executable, "-c", FRESH_IMPORTS, *names], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "", done.stdout
    assert len(names) > 50


TOP_LEVEL_MODULES = {"__init__", "__main__", "errors", "internal", "located", "options",
                     "program"}
STAGE_PACKAGES = {"frontend", "rewrite", "specs", "analysis", "schedule", "banks", "plan",
                  "runtime", "report", "formats", "cli", "zoo", "ops", "integrations"}


def test_the_top_level_holds_the_stage_packages_and_what_they_share() -> None:
    """One package per stage: a new module goes into its stage's folder, not beside them."""
    modules = {path.stem for path in SOURCE.glob("*.py")}
    packages = {path.parent.name for path in SOURCE.glob("*/__init__.py")}
    assert modules == TOP_LEVEL_MODULES
    assert packages == STAGE_PACKAGES


def test_every_package_says_what_it_takes_and_returns() -> None:
    undocumented = [str(path.relative_to(SOURCE)) for path in SOURCE.rglob("__init__.py")
                    if not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    assert undocumented == []


TORCH_FREE = """
import sys
from tensorplan.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # --version, --help and usage errors exit from argparse
    code = exit.code
print(code, "torch" in sys.modules)
"""


def _command(*argv: str) -> list[str]:
    """The lines ``tensorplan ARGV`` prints, the last one: its exit code and whether torch
    was loaded."""
    done = subprocess.run([sys.executable, "-c", TORCH_FREE, *argv], capture_output=True,
                          text=True, check=True)
    return done.stdout.splitlines()


def test_the_command_line_imports_torch_only_for_a_command_that_needs_it(tmp_path) -> None:
    """``--version``, ``--help`` (the zoo's names come from its torch-free catalog), a command's
    ``--help``, a usage error and ``dsa`` (the torch-free planner) never load torch; a model
    command compiles, so it does."""
    instance = tmp_path / "three.csv"
    instance.write_text("id,lower,upper,size\n0,0,2,64\n1,1,3,32\n2,2,4,64\n")
    dsa = _command("dsa", str(instance))
    assert dsa[-1] == "0 False"
    assert any(line.split()[1:2] == ["peak"] and "96" in line for line in dsa), dsa
    version = _command("--version")
    assert version[0].startswith("tensorplan ") and version[-1] == "0 False"
    assert _command("plan")[-1] == "2 False"   # no TARGET: a usage error
    top_help = _command("--help")
    assert top_help[-1] == "0 False" and any("tiny_gpt" in line for line in top_help)
    assert _command("dsa", "--help")[-1] == "0 False"
    assert _command("plan", "--help")[-1] == "0 False"
