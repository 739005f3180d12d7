"""Where a captured program's traced values live: their fake mode and ShapeEnv."""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def program_shape_env(program: ExportedProgram) -> tuple[Any, ShapeEnv | None]:
    """The fake mode and ShapeEnv the program's values were traced in ((None, None) when no
    node carries a fake value)."""
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor) and getattr(value, "fake_mode", None) is not None:
            return value.fake_mode, value.fake_mode.shape_env
    return None, None
