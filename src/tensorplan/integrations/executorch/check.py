"""A ``.pte`` loaded and run in ExecuTorch's own runtime (``portable_lib``) and compared with eager.

:func:`run_pte` is the load-and-run a user needs: ExecuTorch's ``Program`` owns the bytes its
methods run from, so a method whose program was dropped runs freed memory; here the program is
held for the whole run, and the outputs are copied out of the planned arena before the next run
can overwrite them. :func:`check_pte` also compares with the expected outputs and raises
:class:`~tensorplan.errors.ShipError` with the runtime's own log when it refuses the program.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from tensorplan.errors import InputError, ShipError, TensorPlanError
from tensorplan.report.compare import agreement

# A runtime log line that lists a failed kernel call's argument types: noise beside its reason.
_ARGUMENT_TYPE = re.compile(r"\] arg \d+ with type id \d+$")


@dataclass(frozen=True)
class PteCheck:
    """A ``.pte`` method run in ExecuTorch's runtime against the expected outputs."""

    method: str
    outputs: tuple[str, ...]   # "dtype[shape]" of each output tensor
    max_abs_error: float       # largest |ExecuTorch - expected| over the outputs
    matches: bool              # torch.testing.assert_close at its default tolerances


def run_pte(pte: bytes | str | Path, inputs: Sequence[torch.Tensor], *,
            method: str = "forward") -> list[Any]:
    """The outputs of ``method`` of the ``.pte`` (its bytes, or a path) run by ExecuTorch's
    runtime on the flat ``inputs`` (the program's user inputs in order), as tensors that own
    their memory. Raises :class:`InputError` before running when the inputs differ from what
    the method's metadata says it takes (their count, a dtype, a rank, a size past its bound),
    and :class:`ShipError` with ExecuTorch's log when the runtime refuses the program, the
    method or the inputs (an input's values, such as a token id past the vocabulary)."""
    data = Path(pte).read_bytes() if isinstance(pte, (str, Path)) else bytes(pte)
    try:
        from executorch.runtime import Runtime
    except ImportError as error:
        raise TensorPlanError("running a .pte needs ExecuTorch's runtime: "
                              "pip install tensorplan[executorch]") from error
    with _runtime_log() as log:
        try:
            program = Runtime.get().load_program(data)
            if method not in program.method_names:
                raise ShipError(f"the .pte has no method {method!r}; it has "
                                f"{', '.join(sorted(program.method_names))}")
            _check_inputs(program.metadata(method), method, inputs)
            loaded = program.load_method(method)
            outputs = loaded.execute(list(inputs))
        except RuntimeError as error:
            raise ShipError(_refusal(method, inputs, error, log)) from None
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in outputs]


def _check_inputs(meta: Any, method: str, inputs: Sequence[Any]) -> None:
    """Raise :class:`InputError` unless ``inputs`` are as many as ``method`` takes and each
    tensor among them has its input's dtype, rank and sizes at most its sizes (``meta``: the
    method's ``MethodMeta``, whose input sizes are the upper bounds of dynamic dims). Values
    are not checked: a token id past the vocabulary is for the runtime's kernels to refuse."""
    if meta.num_inputs() != len(inputs):
        raise InputError(f"run_pte: the .pte's {method} takes {meta.num_inputs()} inputs, got "
                         f"{len(inputs)}; pass its user inputs in order, flat")
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            _check_input(f"input {index} of the .pte's {method}", value,
                         meta.input_tensor_meta(index))


def _check_input(name: str, value: torch.Tensor, info: Any) -> None:
    """``InputError`` naming ``name`` unless ``value`` fits ``info`` (its ``TensorInfo``)."""
    bound = tuple(info.sizes())
    dtype = torch_dtype(info.dtype())
    if dtype is not None and value.dtype != dtype:
        raise InputError(f"run_pte: {name} has dtype {value.dtype}, the .pte takes {dtype}; "
                         f"convert it with .to({dtype})")
    if value.dim() != len(bound):
        raise InputError(f"run_pte: {name} has rank {value.dim()} (shape "
                         f"{tuple(value.shape)}), the .pte takes rank {len(bound)} (shape at "
                         f"most {bound})")
    for dim, (size, most) in enumerate(zip(value.shape, bound, strict=True)):
        if size > most:
            raise InputError(f"run_pte: dim {dim} of {name} is {size}, past the bound {most} "
                             f"the .pte was lowered for (shape at most {bound}); export with a "
                             "larger Dim max and lower it again to run it larger")


def torch_dtype(code: int) -> torch.dtype | None:
    """The torch dtype of ExecuTorch's ``ScalarType`` number ``code`` (None if it has none)."""
    from executorch.exir.tensor import enum_to_scalar_map

    return {int(scalar): dtype for scalar, dtype in enum_to_scalar_map.items()}.get(code)


def check_pte(pte: bytes | str | Path, inputs: Sequence[torch.Tensor], expected: Any, *,
              method: str = "forward") -> PteCheck:
    """Run the ``.pte`` as :func:`run_pte` does and compare its outputs with ``expected`` (the
    eager outputs, any structure: its tensors are compared in order). Raises :class:`ShipError`
    when the runtime refuses it, and returns the comparison otherwise (``matches`` False when
    the outputs differ)."""
    got = run_pte(pte, inputs, method=method)
    want = [leaf for leaf in pytree.tree_leaves(expected) if isinstance(leaf, torch.Tensor)]
    tensors = [o for o in got if isinstance(o, torch.Tensor)]
    if len(tensors) != len(want):
        raise ShipError(f"the .pte's {method} returned {len(tensors)} tensors where eager "
                        f"returns {len(want)}")
    error, matches = agreement(tensors, want)
    shapes = tuple(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in tensors)
    return PteCheck(method, shapes, error, matches)


def _refusal(method: str, inputs: Sequence[torch.Tensor], error: RuntimeError,
             log: Path) -> str:
    shapes = ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
                       for t in inputs if isinstance(t, torch.Tensor))
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
             if line.strip() and not _ARGUMENT_TYPE.search(line.strip())]
    said = "; ".join(lines[-5:]) if lines else "no log"
    return (f"ExecuTorch's runtime refused the .pte's {method} on inputs ({shapes}): {error} "
            f"(runtime log: {said})")


@contextlib.contextmanager
def _runtime_log() -> Iterator[Path]:
    """Within: what the runtime writes to stderr (file descriptor 2 from its C++ code, or
    Python's ``sys.stderr`` through its bindings) goes to a file, whose path is yielded, and is
    not printed."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "executorch.log"
        saved = os.dup(2)
        try:
            with path.open("a", buffering=1) as sink, contextlib.redirect_stderr(sink):
                os.dup2(sink.fileno(), 2)
                try:
                    yield path
                finally:
                    os.dup2(saved, 2)
        finally:
            os.close(saved)

def whose_refusal(exported: torch.export.ExportedProgram) -> str:
    """What to do about a ``.pte`` of ``exported`` that ExecuTorch's runtime refused, found by
    lowering ``exported`` the way ExecuTorch does on its own (``to_edge().to_executorch()``) and
    running that on the example inputs: refused too, it is ExecuTorch's limitation whatever the
    plan; run, one of tensorplan's techniques broke the program."""
    from executorch.exir import to_edge

    try:
        own = to_edge(exported).to_executorch()
        check_exported(own.buffer, exported)
    except ShipError as error:
        return (f"ExecuTorch's own lowering of the program (to_edge().to_executorch()) is "
                f"refused too ({str(error).partition(': ')[2][:200]}): its kernels do not take "
                "this program whatever the plan (an input layout or an op they refuse); change "
                "the model or its inputs, or report it to ExecuTorch")
    return ("ExecuTorch's own lowering of the program runs: one of tensorplan's techniques "
            "broke it; ship without it (tensorplan pte --no-reuse / --no-reorder / --no-fold; "
            "to_executorch(reuse=False, ...)) and report it with the model")


def check_exported(pte: bytes, exported: torch.export.ExportedProgram,
                   eager: Any = None) -> PteCheck:
    """:func:`check_pte` on the exported program's example inputs (``torch.export`` keeps
    them), against ``eager`` (a callable taking those inputs; default: the exported program's
    module, run as eager PyTorch). Raises ``InputError`` when the program holds no example
    inputs."""
    from tensorplan.errors import InputError
    from tensorplan.runtime.inputs import flatten_inputs

    if exported.example_inputs is None:
        raise InputError("checking a .pte needs example inputs and this program holds none; "
                         "export it with its inputs, or call check_pte(pte, inputs, expected)")
    args, kwargs = exported.example_inputs
    reference = exported.module() if eager is None else eager
    with torch.no_grad():
        expected = reference(*args, **kwargs)
    inputs = [leaf for leaf in flatten_inputs(exported.call_spec.in_spec, args, kwargs)
              if isinstance(leaf, torch.Tensor)]
    return check_pte(pte, inputs, expected)
