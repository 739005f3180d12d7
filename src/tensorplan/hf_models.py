"""``transformers`` models built from small configs with random weights (``zoo:hf_*`` targets).

Nothing is downloaded: every model is built from its config class, so no hub access happens.
``transformers`` is imported inside the factories, so listing the names stays cheap. Each model
is wrapped so that it takes plain tensors and returns a plain tensor (or a tuple of them), which
``torch.export.export(..., strict=False)`` captures without pytree registrations.

Configs (all float32, batch 1):

- ``hf_gpt2``: GPT-2 LM head, 2 layers, n_embd 128, 4 heads, vocab 1000, 64 tokens;
  ``hf_gpt2_dynamic`` the same with ``seq`` in ``[2, 64]``;
- ``hf_bert``: BERT encoder + pooler, 2 layers, hidden 128, 4 heads, intermediate 512,
  vocab 1000, 64 tokens; ``hf_bert_dynamic`` the same with ``seq`` in ``[2, 64]``;
- ``hf_vit``: ViT classifier, 2 layers, hidden 128, 4 heads, image 32, patch 8, 10 labels;
- ``hf_mobilenet_v2``: MobileNetV2 classifier, depth multiplier 0.35, image 96, 10 labels;
- ``hf_llama``: Llama causal LM (RMSNorm, rotary positions, SwiGLU, grouped-query attention),
  2 layers, hidden 128, 4 query and 2 key/value heads, intermediate 344, vocab 1000, 64 tokens;
- ``hf_t5_encoder``: T5 encoder (relative position bias, RMS layer norm), 2 layers, d_model 128,
  4 heads of 32, d_ff 512, vocab 1000, 64 tokens; returns the last hidden state;
- ``hf_distilbert``: DistilBERT encoder, 2 layers, dim 128, 4 heads, hidden 512, vocab 1000,
  64 tokens; returns the last hidden state;
- ``hf_deit``: DeiT classifier, 2 layers, hidden 128, 4 heads, image 32, patch 8, 10 labels;
- ``hf_convnext``: ConvNeXt classifier, widths 16/32/64/128, depths 1/1/2/1, image 64, 10 labels;
- ``hf_mobilevit``: MobileViT classifier, hidden 32/48/64, image 64, 10 labels;
- ``hf_resnet``: ResNet classifier (basic blocks), widths 16/32/64/128, one block per stage,
  image 64, 10 labels;
- ``hf_swin``: Swin classifier, embed 32, depths 1/1/2, heads 2/4/8, window 4, patch 4,
  image 64, 10 labels.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import torch
from torch import nn
from torch.export import Dim

from .example import Example

VOCAB = 1000      # vocabulary of the language models
SEQ = 64          # tokens of the static inputs, and the upper bound of the dynamic ones
SEQ_EXAMPLE = 16  # tokens of the example input of the dynamic variants


class LogitsOnly(nn.Module):
    """Calls a ``transformers`` model with plain tensors and returns its first output."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x, return_dict=False)[0]


class EncoderOutputs(nn.Module):
    """Calls a ``transformers`` encoder and returns ``(last_hidden_state, pooled)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, pooled = self.model(input_ids, attention_mask=attention_mask,
                                    return_dict=False)[:2]
        return hidden, pooled


def _gpt2_model() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4,
                        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                        use_cache=False)
    return LogitsOnly(GPT2LMHeadModel(config)).eval()


def _bert_model() -> nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=512,
                        max_position_embeddings=SEQ, use_cache=False)
    return EncoderOutputs(BertModel(config)).eval()


def _tokens(seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, seq))


def _image(size: int) -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, size, size),)


def _seq_dim() -> Dim:
    return Dim("seq", min=2, max=SEQ)


def hf_gpt2() -> Example:
    """GPT-2 (2 layers, 128 wide) on 64 tokens; returns the logits ``(1, 64, 1000)``."""
    return Example(_gpt2_model(), (_tokens(SEQ),))


def hf_gpt2_dynamic() -> Example:
    """GPT-2 as ``hf_gpt2`` with the sequence length dynamic in ``[2, 64]``."""
    return Example(_gpt2_model(), (_tokens(SEQ_EXAMPLE),), dynamic_shapes=({1: _seq_dim()},))


def hf_bert() -> Example:
    """BERT (2 layers, hidden 128) on 64 tokens with a padding mask; returns hidden and pooled."""
    mask = torch.ones(1, SEQ, dtype=torch.long)
    mask[:, SEQ - 8:] = 0
    return Example(_bert_model(), (_tokens(SEQ), mask))


def hf_bert_dynamic() -> Example:
    """BERT as ``hf_bert`` with the sequence length dynamic in ``[2, 64]``."""
    seq = _seq_dim()
    mask = torch.ones(1, SEQ_EXAMPLE, dtype=torch.long)
    return Example(_bert_model(), (_tokens(SEQ_EXAMPLE), mask),
                   dynamic_shapes=({1: seq}, {1: seq}))


def hf_vit() -> Example:
    """ViT classifier (2 layers, hidden 128, 32x32 image, 8x8 patches); returns 10 logits."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=512, image_size=32, patch_size=8, num_labels=10)
    return Example(LogitsOnly(ViTForImageClassification(config)).eval(), _image(32))


def hf_mobilenet_v2() -> Example:
    """MobileNetV2 classifier (depth multiplier 0.35, 96x96 image); returns 10 logits."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    config = MobileNetV2Config(depth_multiplier=0.35, image_size=96, num_labels=10)
    return Example(LogitsOnly(MobileNetV2ForImageClassification(config)).eval(), _image(96))


def hf_llama() -> Example:
    """Llama (2 layers, hidden 128, grouped-query attention) on 64 tokens; returns the logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=344,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=SEQ, use_cache=False)
    return Example(LogitsOnly(LlamaForCausalLM(config)).eval(), (_tokens(SEQ),))


def hf_t5_encoder() -> Example:
    """T5 encoder (2 layers, d_model 128) on 64 tokens; returns the last hidden state."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=512, num_layers=2,
                      num_heads=4, use_cache=False)
    return Example(LogitsOnly(T5EncoderModel(config)).eval(), (_tokens(SEQ),))


def hf_distilbert() -> Example:
    """DistilBERT (2 layers, dim 128) on 64 tokens; returns the last hidden state."""
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(vocab_size=VOCAB, dim=128, n_layers=2, n_heads=4, hidden_dim=512,
                              max_position_embeddings=SEQ)
    return Example(LogitsOnly(DistilBertModel(config)).eval(), (_tokens(SEQ),))


def hf_deit() -> Example:
    """DeiT classifier (2 layers, hidden 128, 32x32 image, 8x8 patches); returns 10 logits."""
    from transformers import DeiTConfig, DeiTForImageClassification

    config = DeiTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=512, image_size=32, patch_size=8, num_labels=10)
    return Example(LogitsOnly(DeiTForImageClassification(config)).eval(), _image(32))


def hf_convnext() -> Example:
    """ConvNeXt classifier (widths 16 to 128, 64x64 image); returns 10 logits."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], image_size=64,
                            num_labels=10)
    return Example(LogitsOnly(ConvNextForImageClassification(config)).eval(), _image(64))


def hf_mobilevit() -> Example:
    """MobileViT classifier (hidden 32/48/64, 64x64 image); returns 10 logits."""
    from transformers import MobileViTConfig, MobileViTForImageClassification

    config = MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                             neck_hidden_sizes=[8, 16, 24, 24, 32, 48, 160], num_labels=10)
    return Example(LogitsOnly(MobileViTForImageClassification(config)).eval(), _image(64))


def hf_resnet() -> Example:
    """ResNet classifier (basic blocks, widths 16 to 128, 64x64 image); returns 10 logits."""
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                          layer_type="basic", num_labels=10)
    return Example(LogitsOnly(ResNetForImageClassification(config)).eval(), _image(64))


def hf_swin() -> Example:
    """Swin classifier (embed 32, depths 1/1/2, window 4, 64x64 image); returns 10 logits."""
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[1, 1, 2],
                        num_heads=[2, 4, 8], window_size=4, num_labels=10)
    return Example(LogitsOnly(SwinForImageClassification(config)).eval(), _image(64))


def _torchvision_ready(factory: Callable[[], Example]) -> Callable[[], Example]:
    """``factory``, run once torchvision imports: ``transformers`` imports it when it is
    installed, and beside a CPU-only torch that takes ``vision_models.import_torchvision``."""

    @functools.wraps(factory)
    def build() -> Example:
        if importlib.util.find_spec("torchvision") is not None:
            from .vision_models import import_torchvision

            import_torchvision()
        return factory()
    return build


def hf_examples() -> dict[str, Callable[[], Example]]:
    """Factories of the ``transformers`` models by name; calling one imports ``transformers``."""
    factories = {
        "hf_gpt2": hf_gpt2,
        "hf_gpt2_dynamic": hf_gpt2_dynamic,
        "hf_bert": hf_bert,
        "hf_bert_dynamic": hf_bert_dynamic,
        "hf_vit": hf_vit,
        "hf_mobilenet_v2": hf_mobilenet_v2,
        "hf_llama": hf_llama,
        "hf_t5_encoder": hf_t5_encoder,
        "hf_distilbert": hf_distilbert,
        "hf_deit": hf_deit,
        "hf_convnext": hf_convnext,
        "hf_mobilevit": hf_mobilevit,
        "hf_resnet": hf_resnet,
        "hf_swin": hf_swin,
    }
    return {name: _torchvision_ready(factory) for name, factory in factories.items()}
