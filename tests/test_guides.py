"""The guides a user follows start to finish: every code block of every page run in order, in a
folder of its own, as a reader pasting them would.

- ``python`` blocks run in one namespace per guide;
- ``sh`` blocks run in ``bash -e`` with this environment's ``tensorplan`` first on the PATH;
- ``c`` blocks are compiled with ``cc`` (C99, warnings as errors, the folder on the include
  path) and the program run;
- ``cpp`` blocks are compiled with ``c++`` against the headers and libraries of the
  ``executorch`` wheel (its runtime, as a device build links it) and the program run.

A guide with a block of any other language fails: a block no test runs is a block that rots.
A block that fails fails the test with the guide's name, the block's number and its first line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_c_header import CC as C_HEADER_CC

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "guides"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LANGUAGES = ("python", "sh", "c", "cpp")
CC = [*C_HEADER_CC, "-I."]  # the C header's own test's flags, the folder on the path


def blocks(guide: str) -> list[tuple[str, str]]:
    """The code blocks of a guide, in order: (language, code)."""
    return BLOCK.findall((GUIDES / guide).read_text(encoding="utf-8"))


def _with_blocks() -> list[str]:
    return sorted(p.name for p in GUIDES.glob("*.md") if blocks(p.name))


def _shell(code: str) -> None:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    subprocess.run(["bash", "-euo", "pipefail", "-c", code], check=True, timeout=600,
                   env={**os.environ, "PATH": path}, capture_output=True, text=True)


def _c(code: str, number: int) -> None:
    source, program = Path(f"block{number}.c"), Path(f"block{number}").absolute()
    source.write_text(code, encoding="utf-8")
    subprocess.run([*CC, str(source), "-o", str(program)], check=True, capture_output=True,
                   text=True)
    subprocess.run([str(program)], check=True, capture_output=True, text=True, timeout=60)


def _cpp(code: str, number: int) -> None:
    # a namespace package (no __init__.py, no __file__): its one folder
    root = Path(next(iter(pytest.importorskip("executorch").__path__)))
    source, program = Path(f"block{number}.cpp"), Path(f"block{number}").absolute()
    source.write_text(code, encoding="utf-8")
    lib, include = root / "lib", root / "include"
    # What the wheel's lib/cmake/executorch/executorch-config.cmake gives a consumer: the
    # vendored c10 headers and the definitions the libraries were built with; the kernels
    # register themselves when loaded (nothing calls them by name), hence --no-as-needed.
    subprocess.run(["c++", "-std=c++17", "-O1", "-DC10_USING_CUSTOM_GENERATED_MACROS",
                    "-DET_EVENT_TRACER_ENABLED", f"-I{include}",
                    f"-I{include / 'executorch/runtime/core/portable_type/c10'}", str(source),
                    "-o", str(program), f"-L{lib}", f"-Wl,-rpath,{lib}", "-Wl,--no-as-needed",
                    "-lexecutorch", "-lexecutorch_kernels_optimized"],
                   check=True, capture_output=True, text=True, timeout=600)
    subprocess.run([str(program)], check=True, capture_output=True, text=True, timeout=300)


def _run(language: str, code: str, number: int, namespace: dict[str, object],
         guide: str) -> None:
    if language == "python":
        exec(compile(code, f"{guide} block {number}", "exec"), namespace)  # noqa: S102
    elif language == "sh":
        _shell(code)
    elif language == "c":
        _c(code, number)
    else:
        _cpp(code, number)


def test_every_code_block_is_of_a_language_the_guides_test_runs() -> None:
    found = {(guide, language) for guide in _with_blocks() for language, _ in blocks(guide)}
    assert {(g, lang) for g, lang in found if lang not in LANGUAGES} == set()
    assert len(_with_blocks()) >= 10


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("guide", _with_blocks())
def test_every_block_of_the_guide_runs(guide: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("executorch")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"guide_{guide}"}
    for number, (language, code) in enumerate(blocks(guide), 1):
        first = code.splitlines()[0]
        try:
            _run(language, code, number, namespace, guide)
        except subprocess.CalledProcessError as error:
            raise AssertionError(f"{guide}, block {number} ({first!r}): exit "
                                 f"{error.returncode}\n{error.stdout}\n{error.stderr}") from error
        except Exception as error:
            raise AssertionError(f"{guide}, block {number} ({first!r}): {error}") from error
