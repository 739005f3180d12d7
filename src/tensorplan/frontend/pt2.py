"""Loading ``.pt2`` programs (``torch.export.save`` archives) without running code from them.

``torch.export.load`` reads tensor subclasses, sample inputs and legacy payloads with
``torch.load(weights_only=False)`` (or after a failed weights-only attempt), custom objects with
plain pickle, and AOTInductor members as compiled code. Before handing an archive to it, every
member it would unpickle must load with ``weights_only=True``; object and code members are
refused outright. The container types its inputs and outputs are made of are registered
first (``pytree_types.py``: by importing the module of an installed package that defines
each, never code from the archive).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.utils._sympy.value_ranges import ValueRanges

from tensorplan.errors import FormatError
from tensorplan.frontend.dim_names import RECORD_MEMBER, DimNames, record_dim_names
from tensorplan.frontend.fake import program_shape_env
from tensorplan.frontend.pytree_types import register_named_types

# Members of a torch.export archive (below its root folder) that hold data, not code.
_DATA_MEMBERS = ("archive_format", "archive_version", "byteorder", ".data/", "models/",
                 "data/weights/", "data/constants/", "data/sample_inputs/", "extra/")
# Constants that torch.export.load reads with plain pickle: arbitrary Python objects.
_OBJECT_MEMBERS = ("data/constants/custom_obj_", "data/constants/opaque_obj_")


def load_exported(data: bytes, where: str) -> ExportedProgram:
    """The program in a ``.pt2`` archive's bytes, with the ``Dim`` names it records (see
    ``save_exported``); ``FormatError`` naming ``where`` if the archive is damaged, not a
    torch.export program, would make torch unpickle objects, or names an input or output
    container type that no installed module registers."""
    refuse_pickles(data, where)
    register_named_types(data, where)
    extra = {RECORD_MEMBER: ""}
    try:
        with treespec_deprecation_silenced(), _deserializer_failures() as failures:
            program = torch.export.load(io.BytesIO(data), extra_files=extra)
    except Exception as error:  # torch raises many types on a damaged archive
        said = "; ".join(failures) or f"{type(error).__name__}: {error}"
        raise FormatError(f"{where}: not a loadable torch.export program ({said})") from error
    if extra[RECORD_MEMBER]:
        record_dim_names(program, _recorded_names(extra[RECORD_MEMBER], where))
    _as_traced(program)
    return program


class _Failures(logging.Handler):
    """The exceptions ``torch.export.load`` logs (and swallows) while deserializing."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            while error.__cause__ is not None:
                error = error.__cause__
            # torch follows its reason with the whole serialized node: the reason is enough
            self.found.append(str(error).partition(" Unsupported target")[0])


@contextlib.contextmanager
def _deserializer_failures() -> Iterator[list[str]]:
    """Within: what ``torch.export.load``'s deserializer logs as its failure (an operator it
    cannot resolve: a custom op not registered here) is kept in the yielded list, not
    printed, so the error can say it."""
    logger = logging.getLogger("torch.export")
    handler, kept, propagate = _Failures(), logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [handler], False
    try:
        yield handler.found
    finally:
        logger.handlers, logger.propagate = kept, propagate


def _as_traced(program: ExportedProgram) -> None:
    """Give the loaded program's ShapeEnv the ranges its graph was traced under: torch.export
    traces a dynamic size as at least 2 (it specializes 0 and 1), and the ShapeEnv of the
    program it returns says so (``Dim("n", max=64)``: ``[2, 64]``), but the one
    ``torch.export.load`` rebuilds takes the ``range_constraints`` (``[0, 64]``), so a size
    a rewrite derives (the rows of a chunk, ``ceil(n / 8)``) could be 0 and a division by
    it unbounded. The program's ``range_constraints``, the sizes a run accepts, are kept."""
    _, shape_env = program_shape_env(program)
    if shape_env is None:
        return
    for symbol in shape_env.backed_var_to_val:
        known = shape_env.var_to_range.get(symbol)
        if known is not None and known.lower < 2 <= known.upper:
            shape_env.var_to_range[symbol] = ValueRanges(2, known.upper)


def save_exported(program: ExportedProgram, file: str | os.PathLike[str] | io.BytesIO,
                  names: DimNames) -> None:
    """Write ``program`` as ``torch.export.save`` does, with ``names`` (symbol -> ``Dim``
    name), which torch.export.save drops, as an extra member that ``load_exported`` reads."""
    with treespec_deprecation_silenced():
        torch.export.save(program, file, extra_files={RECORD_MEMBER: json.dumps(dict(names))})


@contextlib.contextmanager
def treespec_deprecation_silenced() -> Iterator[None]:
    """Within: torch's own ``isinstance(treespec, LeafSpec)`` FutureWarning, which its
    serializer and ``run_decompositions`` raise while copying a program's tree specs (nothing
    the user wrote), is not shown; every other warning is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`",
                                category=FutureWarning)
        yield


def _recorded_names(text: str, where: str) -> dict[str, str]:
    try:
        names = json.loads(text)
    except ValueError as error:
        raise FormatError(f"{where}: {RECORD_MEMBER} is not JSON ({error})") from error
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in names.items()):
        raise FormatError(f"{where}: {RECORD_MEMBER} must map symbols to Dim names")
    return names


def file_format(data: bytes) -> str | None:
    """What a file's bytes are, among the formats tensorplan knows: ``"pt2"`` (a zip archive
    laid out as torch.export saves), ``"zip"`` (any other zip archive: a program saved with
    ``--save``, a ``torch.save`` checkpoint), ``"pte"`` (an ExecuTorch program), ``"json"``
    (text that opens as JSON does); None for anything else.

    >>> file_format(b' {"schema": 1}'), file_format(bytes(4) + b"ET12"), file_format(bytes(8))
    ('json', 'pte', None)
    """
    if zipfile.is_zipfile(io.BytesIO(data)):
        return "pt2" if "archive_format" in _relative_members(data) else "zip"
    if data[4:6] == b"ET":
        return "pte"
    if data[:64].lstrip()[:1] in (b"{", b"["):
        return "json"
    return None


def _relative_members(data: bytes) -> set[str]:
    """The member names of a zip archive below its root folder (none if it cannot be read)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return {name.partition("/")[2] for name in archive.namelist()}
    except (OSError, EOFError, zipfile.BadZipFile):
        return set()


def other_format(data: bytes, taker: str) -> str | None:
    """What a file that is no zip archive is, and what to give ``taker`` (the command or
    function it was given to) instead, when it is one tensorplan knows of (an ExecuTorch
    ``.pte``, JSON); None otherwise. The first 64 bytes of a file are enough to tell.

    >>> other_format(bytes(4) + b"ET12", "tensorplan run").split("; ")[1]
    'give tensorplan run the model or the .pt2 it was lowered from'
    """
    kind = file_format(data)
    if kind == "pte":
        return (f"an ExecuTorch program (.pte): it runs in ExecuTorch's runtime; give {taker} "
                "the model or the .pt2 it was lowered from")
    if kind == "json":
        return (f"a JSON file (a plan written by --json?): give {taker} a model, a .pt2, or a "
                "program saved with --save")
    return None


def refuse_pickles(data: bytes, where: str) -> None:
    """Raise ``FormatError`` if ``torch.export.load`` would unpickle anything but tensors."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = {name.partition("/")[2]: name for name in archive.namelist()}
            for relative in members:
                if not relative.startswith(_DATA_MEMBERS) or relative.startswith(_OBJECT_MEMBERS):
                    raise FormatError(f"{where}: member {relative!r} holds code or Python "
                                      "objects, which tensorplan does not load")
            for relative in _pickled_members(archive, members, where):
                _load_weights_only(archive.read(members[relative]), f"{where}: {relative}")
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        raise FormatError(f"{where}: not a readable torch.export archive "
                          f"({type(error).__name__}: {error})") from error


def _config_entries(raw: bytes, where: str) -> list[dict[str, Any]]:
    try:
        config = json.loads(raw).get("config", {})
    except (ValueError, AttributeError) as error:
        raise FormatError(f"{where}: not a valid payload config ({error})") from error
    if not isinstance(config, dict) or not all(isinstance(e, dict) for e in config.values()):
        raise FormatError(f"{where}: 'config' must map names to objects")
    return list(config.values())


def _pickled_members(archive: zipfile.ZipFile, members: dict[str, str], where: str) -> list[str]:
    """Members that torch.export.load reads with ``torch.load``: ``.pt`` files and payloads
    that a weights or constants config marks ``use_pickle``."""
    pickled = [relative for relative in members if relative.endswith(".pt")]
    for config in (r for r in members if r.startswith("data/") and r.endswith("_config.json")):
        folder = config.rpartition("/")[0]
        for entry in _config_entries(archive.read(members[config]), f"{where}: {config}"):
            if entry.get("use_pickle") is True:
                pickled.append(f"{folder}/{entry.get('path_name')}")
    return pickled


def _load_weights_only(data: bytes, where: str) -> None:
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as error:  # the weights-only unpickler raises many types
        raise FormatError(f"{where}: holds pickled objects other than tensors, which "
                          f"tensorplan does not unpickle ({type(error).__name__})") from error
