"""Built-in example models (``zoo:NAME`` targets): each name gives an ``Example``, a model
with the inputs (and dynamic shapes) it is captured with. ``catalog.py`` lists the names and
where each is built (no torch import: listing is cheap); ``models.py`` holds the small built-in
ones and builds any of them, ``hf.py`` the ``transformers`` ones, ``vision.py`` the
``torchvision`` and ``timm`` ones and ``clients.py`` the ``diffusers`` and ``ultralytics`` ones,
listed only when those packages are installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorplan.zoo.catalog import names

if TYPE_CHECKING:
    from tensorplan.zoo.base import Example
    from tensorplan.zoo.models import example

__all__ = ["Example", "example", "names"]


def __getattr__(name: str) -> Any:
    """``Example`` and ``example`` are loaded when first used (they import torch)."""
    if name == "Example":
        from tensorplan.zoo.base import Example

        return Example
    if name == "example":
        from tensorplan.zoo.models import example

        return example
    raise AttributeError(f"module 'tensorplan.zoo' has no attribute {name!r}")
