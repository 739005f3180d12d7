"""Every built-in model's name and the factory that builds it, importing neither torch nor the
packages the models come from: ``tensorplan --help`` lists them in a fraction of a second.

A name is listed when the package its family needs is installed (``importlib.util.find_spec``,
which imports nothing); its factory module is imported only when the model is built.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

VIDEO_MODELS = ("r3d_18", "r2plus1d_18")
TIMM_MODELS = ("dla46_c", "cs3darknet_s", "dpn48b", "selecsls42", "hrnet_w18_small", "mixnet_s")
_HF_MODELS = ("gpt2", "gpt2_dynamic", "bert", "bert_dynamic", "vit", "mobilenet_v2", "llama",
              "t5_encoder", "distilbert", "deit", "convnext", "mobilevit", "resnet", "swin",
              "bart", "t5", "olmoe", "qwen2_moe", "wav2vec2", "whisper_decoder", "qwen3_prefill",
              "llama_static_cache", "bert_batch_dynamic", "phi3", "mistral", "gemma2", "falcon",
              "dinov2")


@dataclass(frozen=True)
class Entry:
    """Where a built-in model is built: ``module.function(*args)`` returns its ``Example``;
    ``needs`` are the packages that must be installed for it to be listed."""

    module: str
    function: str
    args: tuple[object, ...] = ()
    needs: tuple[str, ...] = ()


def _entries() -> dict[str, Entry]:
    models = "tensorplan.zoo.models"
    entries = {name: Entry(models, f"_{name}") for name in ("mlp", "convnet", "tiny_gpt",
                                                            "kv_cache")}
    entries.update({f"hf_{name}": Entry("tensorplan.zoo.hf", f"hf_{name}", needs=("transformers",))
                    for name in _HF_MODELS})
    for name in VIDEO_MODELS:
        for suffix, channels_last in (("", False), ("_channels_last", True)):
            entries[f"tv_{name}{suffix}"] = Entry("tensorplan.zoo.vision", "video_model",
                                                  (name, channels_last), ("torchvision",))
    entries.update({f"timm_{name}": Entry("tensorplan.zoo.vision", "timm_model", (name,),
                                          ("torchvision", "timm")) for name in TIMM_MODELS})
    clients = "tensorplan.zoo.clients"
    entries.update({name: Entry(clients, name, needs=("diffusers",))
                    for name in ("diffusers_unet", "diffusers_vae_decoder", "diffusers_sd3")})
    entries["yolov8n"] = Entry(clients, "yolov8n", needs=("ultralytics",))
    return entries


def installed() -> dict[str, Entry]:
    """The entries whose packages are installed, by name."""
    return {name: entry for name, entry in _entries().items()
            if all(importlib.util.find_spec(package) is not None for package in entry.needs)}


def names() -> list[str]:
    """Names of the built-in models whose packages are installed, sorted."""
    return sorted(installed())
