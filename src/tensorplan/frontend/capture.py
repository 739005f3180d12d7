"""Stage 1: capture a model as an ``ExportedProgram`` in core ATen."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch
from torch.export import ExportedProgram

from tensorplan.errors import CaptureError, FormatError
from tensorplan.frontend.pt2 import load_exported, other_format, treespec_deprecation_silenced

# Exception class names of torch.export failures, and what the user can do about each.
_HINTS: tuple[tuple[str, str], ...] = (
    ("GuardOnDataDependentSymNode", "the model branches on a data-dependent value: bound it "
     "with torch._check(...) or rewrite the branch with torch.cond"),
    ("ConstraintViolation", "a dynamic dim was specialised or its range is wrong: widen or "
     "narrow the Dim(min, max) in dynamic_shapes as the message suggests"),
    ("UserError", "follow the torch.export message above; dynamic_shapes must mirror the "
     "structure of args/kwargs"),
    ("Unsupported", "the model uses a Python feature torch.export cannot trace; "
     "see the message above"),
)
_DEFAULT_HINT = ("check that the model runs eagerly on these example inputs; "
                 "torch.export's message above names the failing line")


# Words in torch.export's message that say more than the exception class does.
_MESSAGE_HINTS: tuple[tuple[str, str], ...] = (
    ("aliasing", "a cond/while_loop/map branch returns (a view of) one of its inputs: return "
     "a .clone() of it"),
    ("Constraints violated", "the model needs a condition on a dynamic dim that does not hold "
     "over the whole Dim(min, max): narrow the range as the message says"),
    ("in output, which is not a known type", "the model returns an object torch.export cannot "
     "flatten (a cache object such as DynamicCache): pass use_cache=False (transformers) or "
     "return plain tensors"),
)
_STOP = ("Developer debug context", "from user code:", "The error above", "Set TORCHDYNAMO")
_CUT = ("For more information", "For more details")  # pointers to logs and pages, not reasons
_REASON_LINES = 6  # lines of torch.export's message kept in a CaptureError
_LINE_CHARS = 200  # a kept line is shortened to about this many characters


def _reason(error: BaseException) -> str:
    """The lines of an export error that say what went wrong, without its debug context."""
    kept = []
    for line in str(error).splitlines():
        if any(stop in line for stop in _STOP):
            break
        for cut in _CUT:
            line = line.split(cut)[0]
        if line.strip():
            kept.append(_shortened(line.rstrip()))
        if len(kept) == _REASON_LINES:
            break
    return "\n    ".join(kept)


def _shortened(line: str) -> str:
    """``line`` if it fits ``_LINE_CHARS``; else its leading sentences that fit, or (when the
    first sentence alone is too long) its leading words and " …". A word or URL is kept whole
    or dropped, never cut.

    >>> line = "It failed. " + "See https://github.com/pytorch/functorch/issues/475. " * 4
    >>> _shortened(line).endswith("/issues/475."), len(_shortened(line)) <= 200
    (True, True)
    """
    if len(line) <= _LINE_CHARS:
        return line
    kept = _leading(re.split(r"(?<=[.!?])\s+", line), _LINE_CHARS)
    if len(kept) <= _LINE_CHARS:
        return kept
    return _leading(kept.split(" "), _LINE_CHARS) + " …"


def _leading(parts: list[str], limit: int) -> str:
    """The first of ``parts`` and as many after it as fit in ``limit`` characters, joined
    with spaces."""
    kept = parts[0]
    for part in parts[1:]:
        if len(kept) + 1 + len(part) > limit:
            break
        kept = f"{kept} {part}"
    return kept


def _hint_for(error: BaseException) -> str:
    message = str(error)
    for words, hint in _MESSAGE_HINTS:
        if words in message:
            return hint
    names = {cls.__name__ for cls in type(error).__mro__}
    for name, hint in _HINTS:
        if any(name in n for n in names):
            return hint
    return _DEFAULT_HINT


def _load(path: str | os.PathLike[str]) -> ExportedProgram:
    if not os.path.exists(path):
        raise CaptureError(f"capture: no such file {os.fspath(path)!r}; pass a .pt2 file saved "
                           "with torch.export.save, or a module with example inputs")
    with open(path, "rb") as file:
        data = file.read()
    other = other_format(data, "tp.capture")
    if other is not None:
        raise CaptureError(f"capture: {os.fspath(path)!r} is not a torch.export program but "
                           f"{other}")
    try:
        return load_exported(data, os.fspath(path))
    except FormatError as error:
        raise CaptureError(f"capture: {os.fspath(path)!r} is not a torch.export program that "
                           f"can be loaded safely ({error}); re-save it with torch.export.save"
                           ) from error


def _export(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
            dynamic_shapes: Any, strict: bool = False) -> ExportedProgram:
    try:
        return torch.export.export(model, tuple(args), kwargs=dict(kwargs or {}),
                                   dynamic_shapes=dynamic_shapes, strict=strict)
    except Exception as error:
        raise CaptureError(f"capture: torch.export{' (strict)' if strict else ''} failed on "
                           f"{type(model).__name__} with {type(error).__name__}: "
                           f"{_reason(error)}\n  hint: {_hint_for(error)}") from error


def _decomposed(program: ExportedProgram) -> ExportedProgram:
    """``program`` in core ATen (itself when it is already)."""
    if is_core_aten(program):
        return program
    try:
        with treespec_deprecation_silenced():
            return program.run_decompositions()
    except Exception as error:
        raise CaptureError(f"capture: decomposition to core ATen failed with "
                           f"{type(error).__name__}: {error}\n  hint: {_decomposition_hint(error)}"
                           ) from error


def _captured(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
              dynamic_shapes: Any) -> ExportedProgram:
    """The module exported non-strict and decomposed; where either step fails, exported strict
    (TorchDynamo) and decomposed, as the export recipes of ExecuTorch and optimum-executorch
    do (transformers' static-cache module: its non-strict program does not decompose in torch
    2.13). Raises the non-strict failure, with the strict one's, when both fail."""
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"capture: expected an nn.Module, an ExportedProgram or a .pt2 path, "
                           f"got {type(model).__name__}")
    if args is None:
        raise CaptureError("capture: example inputs are required to export a module; "
                           "pass args=(tensor, ...)")
    try:
        return _decomposed(_export(model, args, kwargs, dynamic_shapes))
    except CaptureError as loose:
        try:
            return _decomposed(_export(model, args, kwargs, dynamic_shapes, strict=True))
        except CaptureError as strict:
            raise CaptureError(f"{loose}\n  a strict export was tried too: "
                               f"{str(strict).splitlines()[0]}") from loose


class ProgramManager(Protocol):
    """What holds an ``ExportedProgram`` per method (ExecuTorch's ``EdgeProgramManager``)."""

    def exported_program(self, method_name: str = "forward") -> ExportedProgram: ...


def capture(model: torch.nn.Module | ExportedProgram | ProgramManager | str | os.PathLike[str],
            args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, *,
            dynamic_shapes: Any = None) -> ExportedProgram:
    """Export ``model`` (non-strict; strict where that fails) and decompose it to core ATen.

    ``model`` may be an ``nn.Module`` with example ``args``/``kwargs`` and optional
    ``dynamic_shapes`` (as for ``torch.export.export``), an ``ExportedProgram``, a program
    manager holding one (ExecuTorch's ``EdgeProgramManager``: its ``forward`` program, kept in
    its own dialect, e.g. a Cortex-M program of ``cortex_m::`` kernels), or the path of a
    ``.pt2`` file written by ``torch.export.save``. The input is never modified: the result is
    a new program, or the given one when every operator in it is core ATen already (decomposing
    again would change nothing and takes seconds on a large model). A module whose non-strict
    export or decomposition fails is exported strict (TorchDynamo) instead. Any failure
    raises ``CaptureError`` chained to the original error, with a hint.

    >>> ep = capture(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    >>> [n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"]
    ['permute.default', 'addmm.default']
    """
    if isinstance(model, (str, os.PathLike)):
        return _decomposed(_load(model))
    if isinstance(model, ExportedProgram):
        return _decomposed(model)
    if not isinstance(model, torch.nn.Module) and callable(getattr(model, "exported_program",
                                                                   None)):
        return _decomposed(_managed(model))
    return _captured(model, args, kwargs, dynamic_shapes)


def _managed(manager: Any) -> ExportedProgram:
    """The ``forward`` program of a program manager (``EdgeProgramManager``)."""
    try:
        program = manager.exported_program("forward")
    except Exception as error:
        raise CaptureError(f"capture: {type(manager).__name__} holds no 'forward' program "
                           f"({type(error).__name__}: {error}); pass "
                           f"manager.exported_program(<method name>)") from error
    if not isinstance(program, ExportedProgram):
        raise CaptureError(f"capture: {type(manager).__name__}.exported_program() returned "
                           f"a {type(program).__name__}, not an ExportedProgram")
    return program


def is_core_aten(program: ExportedProgram) -> bool:
    """Every ATen call in the program and its subgraphs is a core ATen operator or a check
    with no result (``_assert_tensor_metadata``: decomposing keeps it as it is)."""
    return all(
        torch.Tag.core in node.target.tags or not node.target._schema.returns
        for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
    )


def _decomposition_hint(error: Exception) -> str:
    """What to try when ``run_decompositions`` fails: depends on what failed."""
    if "SpecViolation" in type(error).__name__:
        return ("the exported program itself is inconsistent (torch.export's verifier rejects "
                "it, with or without tensorplan); export without the extension that made it")
    return "an operator has no core ATen decomposition; register one or keep it as a custom op"
