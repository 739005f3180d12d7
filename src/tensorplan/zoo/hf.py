"""``transformers`` models built from small configs with random weights (``zoo:hf_*`` targets).

Nothing is downloaded: every model is built from its config class, so no hub access happens.
``transformers`` is imported inside the factories, so listing the names stays cheap. Each model
is wrapped so that it takes plain tensors and returns a plain tensor (or a tuple of them), which
``torch.export.export(..., strict=False)`` captures without pytree registrations.

Configs (all float32, batch 1 unless the batch is dynamic):

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
  image 64, 10 labels;
- ``hf_bart``: BART encoder-decoder LM, 2 + 2 layers, d_model 128, 4 heads, ffn 512,
  vocab 1000, 64 encoder and 16 decoder tokens; returns the logits;
- ``hf_t5``: T5 encoder-decoder LM (its decoder's cache code on, as by default), 2 + 2 layers,
  d_model 128, 4 heads of 32, d_ff 512, vocab 1000, 64 encoder and 16 decoder tokens;
- ``hf_olmoe``: OLMoE causal LM, 2 layers, hidden 64, 4 heads, top-2 of 8 experts of 64
  (transformers' ``batched_mm`` experts), vocab 1000, 32 tokens;
- ``hf_qwen2_moe``: Qwen2-MoE causal LM, 2 layers, hidden 64, 4 query and 2 key/value heads,
  top-2 of 4 experts of 64 (``batched_mm``) and a gated shared expert of 128, vocab 1000,
  32 tokens;
- ``hf_wav2vec2``: Wav2Vec2 encoder, 3 conv feature layers of 32 (kernels 10/3/3, strides
  5/2/2), positional conv of 16, 2 transformer layers, hidden 64, 4 heads, intermediate 128,
  on 0.5 s of 16 kHz audio (8000 samples); returns the last hidden state;
- ``hf_llama_static_cache``: ``hf_llama``'s config wrapped by ``transformers``'
  ``TorchExportableModuleWithStaticCache`` (``transformers.integrations.executorch``), a
  static KV cache of 32 positions in mutable buffers; one decode step, a token id and its
  cache position in, the logits out;
- ``hf_bert_batch_dynamic``: ``hf_bert`` with two dynamic dims, batch in ``[1, 4]`` and seq
  in ``[2, 64]`` (example batch 2, 16 tokens);
- ``hf_whisper_decoder``: optimum-executorch's Whisper decoder recipe, rebuilt: the decoder
  and ``proj_out`` of a Whisper model (2 decoder layers, d_model 64, 4 heads, ffn 128, vocab
  1000) over a static self-attention cache of 32 positions and a static cross-attention cache
  of the 50 encoder frames, both in mutable buffers; one step, a token id, the encoder states
  ``(1, 50, 64)`` and the cache position in, the logits out;
- ``hf_qwen3_prefill``: optimum-executorch's causal-LM recipe (``CausalLMExportableModule``
  without custom kernels), rebuilt: Qwen3 (q/k norms, 2 layers, hidden 64, 4 query and 2
  key/value heads of 16, MLP 128, vocab 1000) in ``TorchExportableModuleForDecoderOnlyLM``'s
  static cache of 64 positions, the prompt length dynamic in ``[1, 63]`` (example 8 tokens);
- ``hf_phi3``: Phi-3 causal LM (fused qkv and gate-up projections), 2 layers, hidden 128,
  4 heads, intermediate 256, vocab 1000, 64 tokens;
- ``hf_mistral``: Mistral causal LM with a sliding window of 16 over its 64 tokens, 2 layers,
  hidden 128, 4 query and 2 key/value heads, intermediate 256, vocab 1000;
- ``hf_gemma2``: Gemma2 causal LM (attention and final logits soft-capped, a sliding window
  of 16 on every other layer, eager attention: transformers offers no SDPA for it), 2 layers,
  hidden 128, 4 query and 2 key/value heads of 32, intermediate 256, vocab 1000, 64 tokens;
- ``hf_falcon``: Falcon causal LM with ALiBi position biases and multi-query attention,
  2 layers, hidden 128, 4 heads, vocab 1000, 64 tokens;
- ``hf_dinov2``: DINOv2 backbone (layer scale, interpolated position embeddings), 2 layers,
  hidden 128, 4 heads, image 56, patch 14; returns the last hidden state ``(1, 17, 128)``.

optimum-executorch itself is not a dependency: its 1.1.0 pins ``transformers==5.0.0rc1`` and
its decoder recipe passes the cache by a keyword later ``transformers`` ignore, so its two
recipes are rebuilt here from what they export (their wrappers, caches and dynamic dims).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.export import Dim

from tensorplan.zoo.base import Example

VOCAB = 1000      # vocabulary of the language models
SEQ = 64          # tokens of the static inputs, and the upper bound of the dynamic ones
SEQ_EXAMPLE = 16  # tokens of the example input of the dynamic variants
DECODER_SEQ = 16  # decoder tokens of the encoder-decoder models
MOE_SEQ = 32      # tokens of the mixture-of-experts models
CACHE_LEN = 32    # positions of the static KV cache
MAX_BATCH = 4     # upper bound of the dynamic batch
AUDIO_SAMPLES = 8000  # 0.5 s of 16 kHz audio
ENCODER_FRAMES = 50  # encoder states the Whisper decoder attends to


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


class Seq2SeqLogits(nn.Module):
    """Calls a ``transformers`` encoder-decoder on encoder and decoder token ids; returns the
    logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, decoder_input_ids=decoder_input_ids, return_dict=False)[0]


class StaticCacheStep(nn.Module):
    """One decode step of a ``TorchExportableModuleWithStaticCache``, token ids and cache
    position in, logits out.

    Non-strict export swaps a module's own buffers for traced ones, but not the tensors the
    cache object holds (the same tensors, reached another way), which it would lift as
    constants written in place; so each call first points the cache's layers at the module's
    buffers (eagerly they are the same tensors: nothing changes).
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.module.static_cache.layers):
            layer.keys = getattr(self.module, f"key_cache_{i}")
            layer.values = getattr(self.module, f"value_cache_{i}")
            layer.cumulative_length = getattr(self.module, f"cumulative_length_{i}")
        return self.module(input_ids=input_ids, cache_position=cache_position)


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


def hf_bart() -> Example:
    """BART encoder-decoder LM (2 + 2 layers, d_model 128) on 64 encoder and 16 decoder tokens;
    returns the logits ``(1, 16, 1000)``."""
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(vocab_size=VOCAB, d_model=128, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=SEQ)
    return Example(Seq2SeqLogits(BartForConditionalGeneration(config)).eval(),
                   (_tokens(SEQ), _tokens(DECODER_SEQ)))


def hf_t5() -> Example:
    """T5 encoder-decoder LM (2 + 2 layers, d_model 128, the decoder's cache on) on 64 encoder
    and 16 decoder tokens; returns the logits ``(1, 16, 1000)``."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=512, num_layers=2,
                      num_decoder_layers=2, num_heads=4)
    return Example(Seq2SeqLogits(T5ForConditionalGeneration(config)).eval(),
                   (_tokens(SEQ), _tokens(DECODER_SEQ)))


def hf_olmoe() -> Example:
    """OLMoE causal LM (2 layers, hidden 64, top-2 of 8 experts through ``batched_mm``) on
    32 tokens; returns the logits."""
    from transformers import OlmoeConfig, OlmoeForCausalLM

    config = OlmoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         num_experts=8, num_experts_per_tok=2, max_position_embeddings=SEQ,
                         eos_token_id=VOCAB - 1, use_cache=False,
                         experts_implementation="batched_mm")
    return Example(LogitsOnly(OlmoeForCausalLM(config)).eval(), (_tokens(MOE_SEQ),))


def hf_qwen2_moe() -> Example:
    """Qwen2-MoE causal LM (2 layers, hidden 64, top-2 of 4 experts through ``batched_mm``,
    a gated shared expert) on 32 tokens; returns the logits."""
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    config = Qwen2MoeConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                            shared_expert_intermediate_size=128, max_position_embeddings=SEQ,
                            use_cache=False, experts_implementation="batched_mm")
    return Example(LogitsOnly(Qwen2MoeForCausalLM(config)).eval(), (_tokens(MOE_SEQ),))


def hf_wav2vec2() -> Example:
    """Wav2Vec2 encoder (3 conv feature layers of 32, 2 transformer layers, hidden 64) on 0.5 s
    of 16 kHz audio; returns the last hidden state ``(1, 399, 64)``."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                            conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=4)
    return Example(LogitsOnly(Wav2Vec2Model(config)).eval(), (torch.randn(1, AUDIO_SAMPLES),))


def hf_llama_static_cache() -> Example:
    """Llama as ``hf_llama`` wrapped by ``transformers.integrations.executorch``'s
    ``TorchExportableModuleWithStaticCache`` (a static KV cache of 32 positions in mutable
    buffers): one decode step, token id and cache position in; returns the logits
    ``(1, 1, 1000)``."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=344,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=SEQ)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static")
    module = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=CACHE_LEN)
    return Example(StaticCacheStep(module).eval(), (_tokens(1), torch.tensor([0])))


class WhisperDecoderStep(nn.Module):
    """optimum-executorch's Whisper decoder with static caches: a step of the decoder and
    ``proj_out`` over a self-attention cache of ``cache_len`` positions and a cross-attention
    cache of the encoder's frames, both ``StaticCache`` layers whose tensors are this module's
    buffers.

    Each call starts from the same state, as the exported program does: the self cache's
    length is the cache position, the cross cache is written again from the encoder states
    (the recipe's flag that would skip that write is a Python value, not a tensor), and the
    cache layers point at the module's buffers (see ``StaticCacheStep``).
    """

    def __init__(self, model: nn.Module, cache_len: int) -> None:
        super().__init__()
        from transformers.cache_utils import EncoderDecoderCache, StaticCache

        config = model.config
        self.decoder, self.proj_out = model.get_decoder(), model.proj_out
        heads = config.decoder_attention_heads
        self.caches = {"self": StaticCache(config=config, max_cache_len=cache_len),
                       "cross": StaticCache(config=config,
                                            max_cache_len=config.max_source_positions)}
        for cache in self.caches.values():
            cache.early_initialization(1, heads, config.d_model // heads, torch.float32,
                                       torch.device("cpu"))
        self.cache = EncoderDecoderCache(self.caches["self"], self.caches["cross"])
        for kind, cache in self.caches.items():
            for i, layer in enumerate(cache.layers):
                self.register_buffer(f"{kind}_key_{i}", layer.keys, persistent=False)
                self.register_buffer(f"{kind}_value_{i}", layer.values, persistent=False)
                self.register_buffer(f"{kind}_length_{i}", layer.cumulative_length,
                                     persistent=False)

    def forward(self, input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor,
                cache_position: torch.Tensor) -> torch.Tensor:
        for kind, cache in self.caches.items():
            for i, layer in enumerate(cache.layers):
                layer.keys = getattr(self, f"{kind}_key_{i}")
                layer.values = getattr(self, f"{kind}_value_{i}")
                layer.cumulative_length = getattr(self, f"{kind}_length_{i}")
                layer.cumulative_length.copy_(cache_position[0] if kind == "self" else 0)
        for i in self.cache.is_updated:
            self.cache.is_updated[i] = False
        out = self.decoder(input_ids=input_ids, encoder_hidden_states=encoder_hidden_states,
                           cache=self.cache, use_cache=True,
                           position_ids=cache_position.unsqueeze(0))
        return self.proj_out(out[0])


def hf_whisper_decoder() -> Example:
    """optimum-executorch's Whisper decoder recipe (see the module docstring); returns the
    logits ``(1, 1, 1000)``."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=VOCAB, d_model=64, encoder_layers=1, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=128, decoder_ffn_dim=128,
                           max_source_positions=ENCODER_FRAMES, max_target_positions=SEQ,
                           num_mel_bins=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    model = WhisperForConditionalGeneration(config).eval()
    return Example(WhisperDecoderStep(model, CACHE_LEN).eval(),
                   (_tokens(1), torch.randn(1, ENCODER_FRAMES, 64), torch.tensor([0])))


def hf_qwen3_prefill() -> Example:
    """optimum-executorch's causal-LM recipe on Qwen3 (see the module docstring): the prompt
    in one call, its length dynamic; returns the logits ``(1, seq, 1000)``."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=SEQ)
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": SEQ})
    module = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=SEQ)
    seq = Dim("seq", min=1, max=SEQ - 1)
    return Example(StaticCacheStep(module.model).eval(), (_tokens(8), torch.arange(8)),
                   dynamic_shapes=({1: seq}, {0: seq}))


def _causal_lm(config: Any, model_class: Any, attention: str = "sdpa") -> Example:
    """A causal LM of ``config`` on ``SEQ`` tokens, the logits out."""
    config._attn_implementation = attention
    return Example(LogitsOnly(model_class(config)).eval(), (_tokens(SEQ),))


def hf_phi3() -> Example:
    """Phi-3 causal LM (2 layers, hidden 128, fused projections) on 64 tokens; the logits."""
    from transformers import Phi3Config, Phi3ForCausalLM

    return _causal_lm(Phi3Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                                 bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=4, max_position_embeddings=SEQ,
                                 pad_token_id=0, use_cache=False), Phi3ForCausalLM)


def hf_mistral() -> Example:
    """Mistral causal LM (2 layers, hidden 128, a sliding window of 16) on 64 tokens."""
    from transformers import MistralConfig, MistralForCausalLM

    return _causal_lm(MistralConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, sliding_window=16,
                                    max_position_embeddings=SEQ, use_cache=False),
                      MistralForCausalLM)


def hf_gemma2() -> Example:
    """Gemma2 causal LM (2 layers, hidden 128, soft-capped attention and logits, a sliding
    window of 16) on 64 tokens, with eager attention; the logits."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return _causal_lm(Gemma2Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=32, sliding_window=16,
                                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                   max_position_embeddings=SEQ, use_cache=False),
                      Gemma2ForCausalLM, attention="eager")


def hf_falcon() -> Example:
    """Falcon causal LM (2 layers, hidden 128, ALiBi, multi-query attention) on 64 tokens."""
    from transformers import FalconConfig, FalconForCausalLM

    return _causal_lm(FalconConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, alibi=True, multi_query=True,
                                   new_decoder_architecture=False, use_cache=False),
                      FalconForCausalLM)


def hf_dinov2() -> Example:
    """DINOv2 backbone (2 layers, hidden 128, image 56, patch 14); the last hidden state."""
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=512, image_size=56, patch_size=14)
    return Example(LogitsOnly(Dinov2Model(config)).eval(), _image(56))


def hf_bert_batch_dynamic() -> Example:
    """BERT as ``hf_bert`` with two dynamic dims: batch in ``[1, 4]`` and seq in ``[2, 64]``."""
    batch, seq = Dim("batch", min=1, max=MAX_BATCH), _seq_dim()
    ids = torch.randint(0, VOCAB, (2, SEQ_EXAMPLE))
    mask = torch.ones(2, SEQ_EXAMPLE, dtype=torch.long)
    # seq first: benchmarks/bench_run.py times the first Dim at its bounds and example size
    return Example(_bert_model(), (ids, mask),
                   dynamic_shapes=({1: seq, 0: batch}, {1: seq, 0: batch}))


def _torchvision_ready(factory: Callable[[], Example]) -> Callable[[], Example]:
    """``factory``, run once torchvision imports: ``transformers`` imports it when it is
    installed, and beside a CPU-only torch that takes ``vision.import_torchvision``."""

    @functools.wraps(factory)
    def build(*args: Any, **kwargs: Any) -> Example:
        if importlib.util.find_spec("torchvision") is not None:
            from tensorplan.zoo.vision import import_torchvision

            import_torchvision()
        return factory(*args, **kwargs)
    return build


@_torchvision_ready
def smollm2_static_cache(layers: int = 30, cache_len: int = 1024, *, hidden: int = 576,
                         heads: int = 9, kv_heads: int = 3, intermediate: int = 1536,
                         vocab: int = 49152) -> Example:
    """SmolLM2-135M's shape (hidden 576, 9 heads over 3 key-value heads, MLP 1536, vocabulary
    49,152; 30 layers by default) as a one-token decode step over a static KV cache of
    ``cache_len`` positions (``TorchExportableModuleWithStaticCache``, as optimum-executorch
    exports it); returns the logits ``(1, 1, 49152)``. Real size: 135 M parameters and a 47 MB
    cache, so it is the real-size benchmark's case (``benchmarks/bench_real_size.py``), not a
    name of the zoo the tests compile. The keywords give other shapes of the same step."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads,
                         max_position_embeddings=cache_len, rope_theta=100000.0,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static")
    module = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=cache_len)
    return Example(StaticCacheStep(module).eval(), (torch.tensor([[1]]), torch.tensor([0])))
