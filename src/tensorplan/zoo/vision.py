"""``torchvision`` and ``timm`` models with random weights (``zoo:tv_*`` and ``zoo:timm_*``).

Nothing is downloaded (``weights=None``, ``pretrained=False``). ``torchvision`` and ``timm`` are
imported inside the factories, so listing the names stays cheap. All take float32 batch-1
inputs and return 10 logits.

- 3-D video nets (``torchvision.models.video``) on a 4-frame 32x32 clip ``(1, 3, 4, 32, 32)``:
  ``tv_r3d_18``, ``tv_r2plus1d_18``, and each in ``channels_last_3d`` (model and clip converted
  with ``memory_format=torch.channels_last_3d``): ``tv_r3d_18_channels_last``,
  ``tv_r2plus1d_18_channels_last``;
- concatenation-heavy CNNs from ``timm`` (the smallest variant of each family) on a 64x64
  image: ``timm_dla46_c`` (DLA), ``timm_cs3darknet_s`` (CSP), ``timm_dpn48b`` (DPN),
  ``timm_selecsls42`` (SelecSLS), ``timm_hrnet_w18_small`` (HRNet), ``timm_mixnet_s`` (MixNet).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch

from tensorplan.frontend.torchvision_import import import_torchvision
from tensorplan.zoo.base import Example

CLASSES = 10                   # logits of every model
CLIP = (1, 3, 4, 32, 32)       # batch, channels, frames, height, width of the video nets
IMAGE = (1, 3, 64, 64)         # the image of the timm models
VIDEO_MODELS = ("r3d_18", "r2plus1d_18")
TIMM_MODELS = ("dla46_c", "cs3darknet_s", "dpn48b", "selecsls42", "hrnet_w18_small", "mixnet_s")

def video_model(name: str, channels_last: bool) -> Example:
    """The ``torchvision.models.video`` net ``name`` on a ``CLIP``, optionally channels_last_3d."""
    model = getattr(import_torchvision().models.video, name)(weights=None, num_classes=CLASSES)
    clip = torch.randn(CLIP)
    if channels_last:
        model, clip = (x.to(memory_format=torch.channels_last_3d) for x in (model, clip))
    return Example(model.eval(), (clip,))


def timm_model(name: str) -> Example:
    """The ``timm`` model ``name`` (random weights) on an ``IMAGE``."""
    import_torchvision()  # timm imports torchvision
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=CLASSES)
    return Example(model.eval(), (torch.randn(IMAGE),))


def vision_examples() -> dict[str, Callable[[], Example]]:
    """Factories by name: the video nets, and the ``timm`` models when ``timm`` is installed.

    Calling one imports ``torchvision`` (and ``timm``); listing them imports neither.
    """
    factories: dict[str, Callable[[], Example]] = {}
    for name in VIDEO_MODELS:
        factories[f"tv_{name}"] = functools.partial(video_model, name, False)
        factories[f"tv_{name}_channels_last"] = functools.partial(video_model, name, True)
    if importlib.util.find_spec("timm") is not None:
        factories.update({f"timm_{name}": functools.partial(timm_model, name)
                          for name in TIMM_MODELS})
    return factories
