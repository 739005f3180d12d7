"""Built-in example models (``zoo:NAME`` targets): each name gives an ``Example``, a model
with the inputs (and dynamic shapes) it is captured with. ``models.py`` holds the small
built-in ones and the registry; ``hf.py`` the ``transformers`` ones, ``vision.py`` the
``torchvision`` and ``timm`` ones and ``clients.py`` the ``diffusers`` and ``ultralytics`` ones,
listed only when those packages are installed."""

from tensorplan.zoo.base import Example
from tensorplan.zoo.models import example, names

__all__ = ["Example", "example", "names"]
