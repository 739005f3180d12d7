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

import torch

from tensorplan.frontend.torchvision_import import import_torchvision
from tensorplan.zoo.base import Example

CLASSES = 10                   # logits of every model
CLIP = (1, 3, 4, 32, 32)       # batch, channels, frames, height, width of the video nets
IMAGE = (1, 3, 64, 64)         # the image of the timm models

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
