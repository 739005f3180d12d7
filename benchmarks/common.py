"""Helpers the benchmark scripts share: ExecuTorch lowering, quiet output, table cells, files."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from tensorplan.zoo import Example


def executorch_installed() -> bool:
    """True when the ``executorch`` package can be imported."""
    return importlib.util.find_spec("executorch") is not None


def one_line(error: BaseException | str, limit: int) -> str:
    """A failure as one line of at most ``limit`` characters that is safe in a markdown cell."""
    if isinstance(error, BaseException):
        lines = str(error).strip().splitlines()
        error = f"{type(error).__name__}: {lines[0] if lines else ''}"
    text = error.replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the warnings and prints of export and lowering."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def lower_to_executorch(example: Example) -> Any:
    """The example exported and lowered by ExecuTorch with its default config (greedy plan).

    Lowering runs under ``torch.no_grad()``: ExecuTorch's passes execute in-place ops on the
    module's parameters, which autograd rejects for leaves that require grad.
    """
    from executorch.exir import to_edge

    exported = torch.export.export(example.model, example.args, example.kwargs,
                                   dynamic_shapes=example.dynamic_shapes, strict=False)
    with torch.no_grad(), quiet():
        return to_edge(exported).to_executorch()


def emit(text: str, out: str | None) -> None:
    """Print a result table, and write it to ``out`` when given."""
    print(text, end="")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
