"""Our own bugs say so: a stage failing in a way it did not mean to raises ``InternalError``.

``with stage("propagate", program):`` (or ``@stage("run")``) around a stage turns any exception
it did not mean to raise (``IndexError``, ``KeyError``, ``AssertionError``, a ``RuntimeError``
from a kernel ...) into an ``InternalError`` chained to it (``raise ... from error``). Its
message names the stage, where in tensorplan it was raised, the node being processed with its
op and argument shapes, and what to attach to a report. These pass through unchanged:

- every ``TensorPlanError`` (the user's errors, and an ``InternalError`` made by a stage nested
  inside this one, so nothing is wrapped twice);
- what is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``);
- the environment's errors: ``OSError`` (a file), ``MemoryError`` (the arena).

The node being processed is found in one of two ways, the first that answers:

1. a graph walk that knows which node failed but holds no ``torch.fx.Node`` in a local (the
   runtime's step loop, whose steps are closures) attaches it to the exception with ``locate``,
   or ``Locating`` from the step that raised (the innermost walk first);
2. otherwise, the innermost traceback frame holding a local ``torch.fx.Node`` (the one named
   ``node`` when it has several): every stage walks a graph with one in hand.

A node is named as in the ``SpecTable``: ``"<submodule>/<node>"`` inside a subgraph, which the
stage finds in the ``program`` it is given (or else the outermost one a failing frame holds).

>>> import torch
>>> graph = torch.fx.Graph()
>>> x = graph.placeholder("x")
>>> x.meta["val"] = torch.empty(2, 3)
>>> y = graph.create_node("call_function", torch.ops.aten.relu.default, (x,), name="relu")
>>> try:
...     with stage("propagate"):
...         node = y
...         raise IndexError("list index out of range")
... except InternalError as error:
...     print(error.stage, "|", error.node)
propagate | relu: aten.relu.default(float32[2,3])
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from collections.abc import Mapping
from contextlib import ContextDecorator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tensorplan.errors import InternalError, TensorPlanError

if TYPE_CHECKING:
    import torch.fx

    from tensorplan.located import Root

PASSED_THROUGH = (TensorPlanError, OSError, MemoryError)  # never wrapped (see above)
_PACKAGE = Path(__file__).parent
_LOCATED = "_tensorplan_node"  # exception attribute ``locate`` sets: (graph prefix, node)
_LONGEST = 240                 # characters of the original message and of an argument list


def versions() -> str:
    """``tensorplan X.Y.Z (torch A.B.C)``: what a report and ``--version`` say."""
    version = importlib.metadata.version
    return f"tensorplan {version('tensorplan')} (torch {version('torch')})"


def report_advice() -> str:
    """What to attach to a report of an internal error."""
    return (f'please report it with the model (torch.export.save(ep, "model.pt2"), or the '
            f"tensorplan command and its target), {versions()} and the full "
            "traceback (the command line prints it with TENSORPLAN_DEBUG=1)")


def locate(error: BaseException, node: torch.fx.Node, prefix: str = "") -> None:
    """Record that ``error`` was raised while processing ``node`` of the graph ``prefix``
    (``""`` top level, ``"<submodule>/"`` a subgraph), unless a walk nested deeper did."""
    if not hasattr(error, _LOCATED):
        setattr(error, _LOCATED, (prefix, node))


@dataclass(frozen=True)
class Locating:
    """``with Locating(nodes, prefix):`` around a walk whose steps are closures holding no
    node: an exception leaving it is ``locate``d at the node of the innermost traceback frame
    holding one of the steps (``nodes``: ``id`` of a step -> its node) in a local."""

    nodes: Mapping[int, torch.fx.Node]  # id of a step -> the node it runs
    prefix: str = ""                    # the graph: "" top level, "<submodule>/" a subgraph

    def __enter__(self) -> Locating:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: types.TracebackType | None) -> bool:
        if isinstance(error, Exception):
            for frame, _ in _frames(error.__traceback__):
                found = [self.nodes[id(v)] for v in frame.f_locals.values()
                         if id(v) in self.nodes]
                if found:
                    locate(error, found[0], self.prefix)
                    break
        return False


@dataclass(frozen=True)
class Stage(ContextDecorator):
    """A context manager and decorator: an unexpected failure inside is an ``InternalError``.

    Stateless, so one instance can be entered again and from several threads.
    """

    name: str                    # the stage, as the user reads it
    program: Root | None = None  # where subgraphs are found, to name their nodes (None: the
    #                              outermost program or GraphModule a failing frame holds)
    unless: str | None = None    # when the failure may be the user's after all (None: never)

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: types.TracebackType | None) -> bool:
        if not isinstance(error, Exception) or isinstance(error, PASSED_THROUGH):
            return False
        raise internal_error(self, error) from error


def stage(name: str, program: Root | None = None, unless: str | None = None) -> Stage:
    """``with stage("schedule", program):`` or ``@stage("run")``: see the module's docstring.

    ``unless`` names the case where the failure is the user's after all (a run: the model
    fails on these inputs in eager too); the message then says so.
    """
    return Stage(name, program, unless)


def internal_error(failed: Stage, error: Exception) -> InternalError:
    """The ``InternalError`` for ``error`` raised inside stage ``failed`` (not chained yet)."""
    frames = _frames(error.__traceback__)
    message = " ".join(str(error).split())[:_LONGEST]
    whose = (", not in the model or its inputs" if failed.unless is None
             else f" unless {failed.unless}")
    summary = (f"internal error in {failed.name} ({_raised_at(frames)}): "
               f"{type(error).__name__}{': ' + message if message else ''}. This is a bug in "
               f"tensorplan{whose}: {report_advice()}")
    return InternalError(summary, failed.name, _node(error, frames, failed.program))


def _node(error: Exception, frames: list[tuple[types.FrameType, int]],
          program: Root | None) -> str | None:
    """The node ``error`` was raised at, described; None where there is none (an error raised
    before torch was ever imported, on the torch-free paths of the command line, has none)."""
    if "torch" not in sys.modules:
        return None
    from tensorplan.located import describe, node_in_frames, root_in_frames

    located = getattr(error, _LOCATED, None) or node_in_frames(
        frames, root_in_frames(frames) if program is None else program)
    return describe(*located) if located else None


def _frames(trace: types.TracebackType | None) -> list[tuple[types.FrameType, int]]:
    """The frames of a traceback with their current lines, innermost first."""
    frames = []
    while trace is not None:
        frames.append((trace.tb_frame, trace.tb_lineno))
        trace = trace.tb_next
    return frames[::-1]


def _raised_at(frames: list[tuple[types.FrameType, int]]) -> str:
    """``file.py:line, function`` of the innermost frame in tensorplan's own code."""
    for frame, line in frames:
        path = Path(frame.f_code.co_filename)
        if path.is_relative_to(_PACKAGE):
            return f"{path.relative_to(_PACKAGE).as_posix()}:{line}, {frame.f_code.co_name}"
    return "outside tensorplan's code"
