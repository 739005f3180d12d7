"""Models of ``diffusers`` and ``ultralytics``, built as their users build them, random
weights (``zoo:diffusers_*`` and ``zoo:yolov8n``; listed only when the package is installed:
``pip install 'tensorplan[clients]'``).

Nothing is downloaded: each model comes from its config (diffusers) or its bundled yaml
(ultralytics). Both packages import ``torchvision`` when it is installed, so each factory first
makes it importable beside the CPU torch (``vision.import_torchvision``).

- ``diffusers_unet``: an SD-shaped ``UNet2DConditionModel`` (cross-attention down block, plain
  up and down blocks, widths 32/64, 8 norm groups, heads of 8) at batch 2 (classifier-free
  guidance), 16x16 latents of 4 channels, 7 text tokens of width 32; returns the noise;
- ``diffusers_vae_decoder``: an ``AutoencoderKL`` decoder, widths 32/64, 8 norm groups, 16x16
  latents of 4 channels to a 32x32 image; returns the image;
- ``diffusers_sd3``: an SD3 ``SD3Transformer2DModel`` (MMDiT: joint attention over image and
  text tokens), 2 layers, 2 heads of 16, patch 2, 16x16 latents, 7 text tokens of width 32,
  pooled text of 16; returns the noise;
- ``yolov8n``: ultralytics' ``DetectionModel`` from ``yolov8n.yaml`` at 320x320; returns the
  boxes and class scores ``(1, 84, 2100)``.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import nn

from tensorplan.zoo.base import Example


class FirstOutput(nn.Module):
    """Calls a model and returns the first tensor of its output (a tensor, a tuple or a
    ``ModelOutput``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> torch.Tensor:
        out = self.model(*args)
        return out if isinstance(out, torch.Tensor) else out[0]


class Keywords(nn.Module):
    """Calls a model with its positional arguments as the keywords ``names``, ``return_dict``
    off, and returns the first output."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, args, strict=True)), return_dict=False)[0]


def _ready() -> None:
    if importlib.util.find_spec("torchvision") is not None:
        from tensorplan.zoo.vision import import_torchvision

        import_torchvision()


def diffusers_unet() -> Example:
    """The UNet of the module docstring at batch 2."""
    _ready()
    from diffusers import UNet2DConditionModel

    unet = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)
    args = (torch.randn(2, 4, 16, 16), torch.tensor([10, 10]), torch.randn(2, 7, 32))
    return Example(FirstOutput(unet.eval()).eval(), args)


def diffusers_vae_decoder() -> Example:
    """The VAE decoder of the module docstring."""
    _ready()
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64),
                        layers_per_block=1, norm_num_groups=8, sample_size=32).eval()

    class Decode(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vae = vae

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return self.vae.decode(z, return_dict=False)[0]

    return Example(Decode().eval(), (torch.randn(1, 4, 16, 16),))


def diffusers_sd3() -> Example:
    """The SD3 MMDiT of the module docstring."""
    _ready()
    from diffusers import SD3Transformer2DModel

    model = SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16).eval()
    names = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep")
    args = (torch.randn(1, 4, 16, 16), torch.randn(1, 7, 32), torch.randn(1, 16),
            torch.tensor([10.0]))
    return Example(Keywords(model, names).eval(), args)


def yolov8n() -> Example:
    """YOLOv8n from its yaml at 320x320. Its ``Detect`` head caches the anchors of the last
    input size: the model is called once here, eagerly, so the trace finds them made."""
    _ready()
    from ultralytics.nn.tasks import DetectionModel

    model = FirstOutput(DetectionModel("yolov8n.yaml", verbose=False).eval()).eval()
    x = torch.rand(1, 3, 320, 320)
    with torch.no_grad():
        model(x)
    return Example(model, (x,))
