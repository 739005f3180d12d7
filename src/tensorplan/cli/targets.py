"""What ``tensorplan plan TARGET`` plans: a built-in model, a factory, or a saved file.

A target is one of:

- ``zoo:NAME``: a built-in model (``tensorplan.zoo``);
- ``package.module:factory``: a callable, called without arguments, that returns a
  ``zoo.Example``, ``(model, args)``, ``(model, args, kwargs)`` or
  ``(model, args, kwargs, dynamic_shapes)``; the current directory is importable, as under
  ``python -m``;
- the path of a file: a program written by ``torch.export.save``, or a tensorplan program file
  written by ``Program.save``. The two are told apart by content, whatever the file is called.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import importlib.util
import os
import sys
from typing import Any

import torch
from torch.export import ExportedProgram

from tensorplan import zoo
from tensorplan.banks.choice import BankOptions
from tensorplan.cli.options import FORMS, banks
from tensorplan.errors import InputError
from tensorplan.formats.artifact import is_artifact
from tensorplan.frontend.capture import capture
from tensorplan.frontend.pt2 import other_format
from tensorplan.options import CompileOptions
from tensorplan.plan.plan import PlanOptions
from tensorplan.program import Program, compile, load
from tensorplan.rewrite.options import RewriteOptions
from tensorplan.schedule.schedule import ScheduleOptions


def compile_options(args: argparse.Namespace) -> CompileOptions | None:
    """Compile options given on the command line (``plan``'s, or the groups ``pte`` shares:
    switches, algorithm, banks), or None when none was given."""
    given = {
        key: value
        for key in ("algorithm", "alignment")
        if (value := getattr(args, key, None)) is not None
    }
    if getattr(args, "inputs_outside", False):
        given["inputs_in_arena"] = False
    switches = ScheduleOptions(args.reuse, args.reorder, args.fold)
    chosen = banks(getattr(args, "bank", None))
    pins = tuple(getattr(args, "pin", ()))
    chunked = getattr(args, "chunks", None)
    constants_bank = getattr(args, "constants_bank", None)
    asked = CompileOptions(RewriteOptions(getattr(args, "patches", None), chunks=chunked),
                           switches,
                           BankOptions(chosen, pins, constants_bank),
                           dataclasses.replace(PlanOptions(), **given))
    return None if asked == CompileOptions() else asked


def load_target(target: str, params: CompileOptions | None = None,
                example: zoo.Example | None = None, *, command: str) -> Program:
    """Compile the program ``target`` names (see the module docstring for the forms).

    A tensorplan program file keeps its saved plan unless ``params`` is given, in which case
    its embedded program is planned again with them; every other target is compiled with
    ``params`` (default ``CompileOptions()``). ``example`` is the target's ``load_example``
    when the caller has it already: a factory is called once, so the program is compiled from
    the very model the caller compares it with. A malformed target raises ``InputError``
    naming ``command`` (the subcommand it was given to) where it says what to give instead.
    """
    example = example or load_example(target)
    if example is None:
        return _from_file(target, params, command)
    return compile(example.model, example.args, example.kwargs,
                   dynamic_shapes=example.dynamic_shapes, options=params)


def load_example(target: str) -> zoo.Example | None:
    """The eager model and example inputs a model target names; None for a file target."""
    if os.path.isfile(target) or target.endswith(".pt2"):
        return None
    module, colon, attribute = target.partition(":")
    if not (colon and module and attribute):
        raise InputError(f"target {target!r}: expected {FORMS}")
    return zoo.example(attribute) if module == "zoo" else _from_factory(module, attribute)


def target_name(target: str) -> str:
    """A short name for outputs: the zoo name, the factory name, or the file's stem.

    >>> target_name("zoo:tiny_gpt"), target_name("models.vision:make_resnet")
    ('tiny_gpt', 'make_resnet')
    """
    if os.path.isfile(target) or target.endswith(".pt2"):
        return os.path.splitext(os.path.basename(target))[0]
    return target.rpartition(":")[2]


def load_exported(path: str, *, command: str) -> ExportedProgram:
    """The program in a ``.pt2`` file or a tensorplan program file, not planned yet; a file
    of another kind raises ``InputError`` saying what to give ``command`` instead."""
    _require_program_file(path, command)
    return load(path).exported_program if is_artifact(path) else capture(path)


def _from_file(path: str, params: CompileOptions | None, command: str) -> Program:
    _require_program_file(path, command)
    if params is None and is_artifact(path):
        return load(path)
    return compile(load_exported(path, command=command), options=params)


def _require_program_file(path: str, command: str) -> None:
    """``InputError`` when ``path`` is no file, or one that holds no program: Python source
    (a factory target lacking its ``:FUNCTION``), an ExecuTorch ``.pte``, JSON."""
    if not os.path.isfile(path):
        raise InputError(f"target {path!r}: no such file")
    if path.endswith(".py"):
        raise InputError(_python_file(path))
    with open(path, "rb") as file:
        other = other_format(file.read(64), f"tensorplan {command}")
    if other is not None:
        raise InputError(f"target {path!r} is not a torch.export program but {other}")


def _python_file(path: str) -> str:
    """What to give instead of a Python file: ``path:FUNCTION``, with the functions it
    defines at top level when they can be read."""
    functions = _top_level_functions(path)
    listed = f" (its top-level functions: {', '.join(functions)})" if functions else ""
    return (f"target {path!r} is a Python file: name the function in it that returns the "
            f"model and its example inputs, as {path}:FUNCTION{listed}")


def _top_level_functions(path: str) -> list[str]:
    """The public functions a Python file defines at top level, read without importing it
    (none when it does not parse)."""
    try:
        with open(path, "rb") as file:
            tree = ast.parse(file.read(), path)
    except (OSError, SyntaxError, ValueError):  # ValueError: null bytes in the source
        return []
    return [node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]


def _from_factory(module_name: str, attribute: str) -> zoo.Example:
    target = f"{module_name}:{attribute}"
    factory = getattr(_import(module_name, target), attribute, None)
    if not callable(factory):
        raise InputError(f"target {target!r}: module {module_name!r} has no callable "
                         f"{attribute!r}")
    try:
        made = factory()
    except Exception as error:
        raise InputError(f"target {target!r}: the factory raised {type(error).__name__}: "
                         f"{error}") from error
    return _as_example(made, target)


def _import(module_name: str, target: str) -> Any:
    """The module a factory target names: a dotted module on the path (the working directory
    first), or a ``.py`` file (its directory put first on the path, so it imports its
    neighbours)."""
    is_file = module_name.endswith(".py") or os.sep in module_name or "/" in module_name
    if is_file and not os.path.isfile(module_name):
        raise InputError(f"target {target!r}: no such file {module_name!r}; expected {FORMS}")
    where = os.path.dirname(os.path.abspath(module_name)) if is_file else os.getcwd()
    if where not in sys.path:
        sys.path.insert(0, where)
    try:
        if not is_file:
            return importlib.import_module(module_name)
        name = os.path.splitext(os.path.basename(module_name))[0]
        spec = importlib.util.spec_from_file_location(name, module_name)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(module)
        return module
    except Exception as error:  # ImportError, or whatever the module raises while it loads
        raise InputError(f"target {target!r}: cannot import {module_name!r} "
                         f"({type(error).__name__}: {error}); expected {FORMS}") from error


_RETURNS = ("a zoo.Example, (model, args), (model, args, kwargs) or "
            "(model, args, kwargs, dynamic_shapes) with model an nn.Module, args a tuple or list "
            "and kwargs a dict")


def _as_example(made: Any, target: str) -> zoo.Example:
    if isinstance(made, zoo.Example):
        return made
    if isinstance(made, tuple) and 2 <= len(made) <= 4:
        model, args, *rest = made
        kwargs, dynamic_shapes = (*rest, None, None)[:2]
        if isinstance(model, torch.nn.Module) and isinstance(args, (tuple, list)) \
                and isinstance(kwargs, (dict, type(None))):
            return zoo.Example(model, tuple(args), dict(kwargs or {}), dynamic_shapes)
    raise InputError(f"target {target!r}: the factory returned {_describe(made)}; expected "
                     f"{_RETURNS}")


def _describe(made: Any) -> str:
    if isinstance(made, tuple):
        return "(" + ", ".join(type(item).__name__ for item in made) + ")"
    return type(made).__name__
