"""``Example``: a model with the inputs it is captured with (what zoo factories return)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn


@dataclass(frozen=True)
class Example:
    """A model with the inputs it is captured with."""

    model: nn.Module                  # the eager module, in eval mode
    args: tuple[Any, ...]             # example positional inputs
    kwargs: dict[str, Any] = field(default_factory=dict)  # example keyword inputs
    dynamic_shapes: Any = None        # as for torch.export.export
