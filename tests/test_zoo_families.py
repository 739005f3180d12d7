"""The zoo's newer families: encoder-decoders (BART, T5 with its decoder), mixtures of experts
(OLMoE, Qwen2-MoE), an audio encoder (Wav2Vec2), a decoder exported through
``transformers.integrations.executorch`` with a static KV cache, and a model with two dynamic
dims.

Each plan is at its lower bound, each run equals eager (on several inputs; step by step for the
cache, at several sizes for the dynamic dims), and no arena is above ExecuTorch's (constant
propagation on) for the same model. Each model is compiled once per process
(``test_hf_models.compiled``) and lowered by ExecuTorch once per process
(``executorch_reference.executorch_arena``).
"""

from __future__ import annotations

import functools

import pytest
import test_hf_models as hf
import torch
from executorch_reference import executorch_arena

import tensorplan as tp
from tensorplan import zoo
from tensorplan.zoo.hf import CACHE_LEN, VOCAB

pytest.importorskip("transformers")
pytest.importorskip("executorch")
pytestmark = pytest.mark.slow

STATIC = ["hf_bart", "hf_t5", "hf_olmoe", "hf_qwen2_moe", "hf_wav2vec2"]
CACHE = "hf_llama_static_cache"
TWO_DIMS = "hf_bert_batch_dynamic"
FAMILIES = [*STATIC, CACHE, TWO_DIMS]
RUNS = 3  # inputs each static model is run on
# (model, ExecuTorch configuration) pairs compared: constant propagation on everywhere, and on
# the cache also its re-inplace pass (it writes the cache's index_put in place: its best there).
EXECUTORCH_CASES = [*((name, "const-prop") for name in FAMILIES),
                    (CACHE, "const-prop + re-inplace")]

# Functional fallbacks per run: ops with no native out-variant on CPU (ATen generates theirs).
FALLBACKS = {
    "hf_bart": {"aten.native_layer_norm.default": 12},
    "hf_t5": {},
    "hf_olmoe": {},
    "hf_qwen2_moe": {},
    "hf_wav2vec2": {"aten.convolution.default": 4, "aten.native_group_norm.default": 1,
                    "aten.native_layer_norm.default": 6},
}

# The static cache's state: per layer a key and a value cache (batch 1, 2 key/value heads,
# 32 positions, head 32, float32) and the filled length (an int64 scalar, 16-byte aligned).
CACHE_STATE = {f"{kind}_{layer}": size for layer in range(2)
               for kind, size in (("key_cache", 8192), ("value_cache", 8192),
                                  ("cumulative_length", 16))}
DECODE_STEPS = 6
# (batch, seq) pairs the two-dims model is run at, its bounds' corners among them.
BATCH_SEQ = [(1, 2), (4, 64), (2, 23), (3, 41), (1, 64), (4, 2)]


@functools.cache
def example(name: str) -> zoo.Example:
    """Zoo model ``name`` built once per process, for eager runs of a model without state
    (the same seed as ``test_hf_models.compiled``'s: the same weights)."""
    return zoo.example(name)


def eager(name: str, *args: torch.Tensor) -> object:
    """Eager zoo model ``name`` on ``args``."""
    with torch.no_grad():
        return example(name).model(*args)


def static_inputs(name: str, seed: int) -> tuple[torch.Tensor, ...]:
    """Inputs shaped like the example inputs of ``name``: token ids, or audio."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, VOCAB, arg.shape, generator=generator)
                 if arg.dtype == torch.int64 else torch.randn(arg.shape, generator=generator)
                 for arg in example(name).args)


@pytest.mark.parametrize("name", STATIC + [TWO_DIMS])
def test_plan_is_tight_with_constants_outside_and_free_views(name: str) -> None:
    hf.check_model_plan(name, hf.compiled(name))


@pytest.mark.parametrize(("name", "config"), EXECUTORCH_CASES)
def test_arena_is_not_above_executorch(name: str, config: str) -> None:
    assert hf.compiled(name).plan.arena_bytes <= executorch_arena(name, config)


@pytest.mark.parametrize("name", STATIC)
def test_static_model_matches_eager_on_several_inputs(name: str) -> None:
    runner = hf.compiled(name).runner()
    for seed in range(RUNS):
        args = static_inputs(name, seed)
        torch.testing.assert_close(runner.run(*args), eager(name, *args))
    assert dict(runner.stats.fallbacks) == {op: RUNS * n for op, n in FALLBACKS[name].items()}


def check_cache_is_state(program: tp.Program) -> None:
    """The parameters and the rotary buffers are constants; each cache buffer is one state
    storage of its exact size, which its ``index_put`` update (or length ``add``) shares."""
    roles = program.roles
    assert len(roles.constants) == 21 + 2  # parameters, inv_freq and original_inv_freq
    assert all(program.specs[name].storage is None for name in roles.constants)
    buffers = roles.state_buffers
    assert sorted(target.removeprefix("module.") for target in buffers.values()) \
        == sorted(CACHE_STATE)
    for placeholder, target in buffers.items():
        planned = program.plan.storages[hf.storage(program, placeholder)]
        assert planned.kind == "state"
        assert planned.size == CACHE_STATE[target.removeprefix("module.")]
        assert len(planned.values) >= 2, planned  # the update writes the buffer in place


def test_static_cache_plan_is_tight_with_the_cache_as_state() -> None:
    program = hf.compiled(CACHE)
    hf.check_plan_is_tight(program)
    hf.check_views_cost_nothing(program)
    hf.check_output_sizes(CACHE, program)
    check_cache_is_state(program)


def test_static_cache_decodes_step_by_step_like_eager() -> None:
    runner, model = hf.compiled(CACHE).runner(), zoo.example(CACHE).model
    token = torch.tensor([[7]])
    for position in range(DECODE_STEPS):
        step = (token, torch.tensor([position]))
        with torch.no_grad():
            expected = model(*step)
        torch.testing.assert_close(runner.run(*step), expected)
        token = expected[:, -1].argmax(-1, keepdim=True)
    state = runner.state_dict()
    for name, buffer in model.module.named_buffers():
        if name in CACHE_STATE:
            torch.testing.assert_close(state[f"module.{name}"], buffer)
    filled = state["module.key_cache_0"].abs().sum(dim=(0, 1, 3)) > 0
    assert filled.tolist() == [True] * DECODE_STEPS + [False] * (CACHE_LEN - DECODE_STEPS)


def test_two_dynamic_dims_plan_at_both_upper_bounds() -> None:
    program = hf.compiled(TWO_DIMS)
    ids, mask = program.exported_program.graph_signature.user_inputs
    for name in (ids, mask):
        assert program.specs[name].shape == (4, 64) and program.specs[name].is_dynamic
    hf.check_plan_is_tight(program)


def test_two_dynamic_dims_match_eager_at_several_sizes() -> None:
    runner = hf.compiled(TWO_DIMS).runner()
    for batch, seq in BATCH_SEQ:
        ids = torch.randint(0, VOCAB, (batch, seq))
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[0, seq // 2:] = 0  # the first row padded
        torch.testing.assert_close(runner.run(ids, mask), eager(TWO_DIMS, ids, mask))
    assert dict(runner.stats.fallbacks) == {"aten.native_layer_norm.default": 5 * len(BATCH_SEQ)}
