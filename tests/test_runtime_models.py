"""Model-level runtime checks: transformers models (random weights) run out of the arena and
match eager PyTorch, static and with a dynamic sequence length at three sizes."""

from __future__ import annotations

import pytest
import torch

import tensorplan as tp
from tensorplan import zoo

pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

STATIC = ["hf_gpt2", "hf_bert", "hf_vit", "hf_mobilenet_v2", "hf_llama", "hf_distilbert",
          "hf_deit", "hf_convnext", "hf_mobilevit", "hf_resnet", "hf_swin", "hf_t5_encoder"]
DYNAMIC = ["hf_gpt2_dynamic", "hf_bert_dynamic"]
# Functional fallbacks per run: ops with no native out-variant on CPU (ATen generates theirs).
LAYER_NORMS = {"aten.native_layer_norm.default": 5}
EXPECTED_FALLBACKS = {
    "hf_gpt2": LAYER_NORMS, "hf_bert": LAYER_NORMS, "hf_gpt2_dynamic": LAYER_NORMS,
    "hf_bert_dynamic": LAYER_NORMS,
    "hf_vit": {**LAYER_NORMS, "aten.convolution.default": 1},
    # 41 of its 52 pads write only their border (their input made in the interior, concat.py)
    "hf_mobilenet_v2": {"aten.constant_pad_nd.default": 11, "aten.convolution.default": 52},
    "hf_llama": {},
    "hf_t5_encoder": {},
    "hf_distilbert": LAYER_NORMS,
    "hf_deit": {**LAYER_NORMS, "aten.convolution.default": 1},
    "hf_convnext": {"aten.convolution.default": 9, "aten.native_layer_norm.default": 10},
    "hf_mobilevit": {"aten.convolution.default": 35, "aten.native_layer_norm.default": 21},
    "hf_resnet": {"aten.convolution.default": 12},
    "hf_swin": {"aten.convolution.default": 1, "aten.native_layer_norm.default": 12,
                "aten.constant_pad_nd.default": 4},
}


def _compile(name: str) -> tuple[zoo.Example, tp.Program]:
    example = zoo.example(name)
    prog = tp.compile(example.model, example.args, example.kwargs,
                      dynamic_shapes=example.dynamic_shapes)
    return example, prog


@pytest.mark.parametrize("name", STATIC)
def test_static_model_matches_eager_with_no_fallback(name):
    example, prog = _compile(name)
    with torch.no_grad():
        expected = example.model(*example.args, **example.kwargs)
    torch.testing.assert_close(prog.run(*example.args, **example.kwargs), expected)
    assert prog.stats == EXPECTED_FALLBACKS[name]


def _resized(example: zoo.Example, length: int) -> tuple:
    """Token ids of ``length`` for the first input, an all-ones attention mask for the rest."""
    ids = torch.randint(1, 999, (1, length))
    return (ids, *(torch.ones(1, length, dtype=torch.int64) for _ in example.args[1:]))


@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_sequence_length_at_a_sweep_of_sizes(name):
    """Equal to eager at every size of a sweep, out of the arena at the bounds (the default)
    and out of one that grows to the largest size run, which is at the lower bound there."""
    example, prog = _compile(name)
    growing = prog.runner(arena="grow")
    largest = 2
    for length in (2, 23, 8, 64, 16, 3):
        args = _resized(example, length)
        with torch.no_grad():
            expected = example.model(*args)
        torch.testing.assert_close(prog.run(*args), expected)
        torch.testing.assert_close(growing.run(*args), expected)
        largest = max(largest, length)
        assert growing.arena.nbytes == prog.plan.arena_bytes_at(seq=largest) \
            == prog.plan.lower_bound_at(seq=largest)
    assert prog.stats == {op: 6 * n for op, n in EXPECTED_FALLBACKS[name].items()}
