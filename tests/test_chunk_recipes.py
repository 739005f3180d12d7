"""Chunks on the programs the export recipes make (issue 47 items 3 and 5), on tiny configs.

ExecuTorch's Llama (``construct_transformer`` from its wheel, KV cache, ``Dim("token_dim",
max=max_seq_len - 1)``, strict export as ``LLMEdgeManager`` does), transformers' static-cache
decoder as optimum-executorch exports it, and BERT with a plain ``Dim``: each chunks as a loop,
equal to eager at the range's smallest size, an odd size, one row below a chunk boundary and the
largest; the Llama's decode step (one token after a prefill) too, and its ``.pte`` in
ExecuTorch's runtime. Real sizes are in ``benchmarks/bench_chunks.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_capture import _static_cache_llm

import tensorplan as tp

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

CONTEXT = 128  # the Llama's max_seq_len and max_context_len


def _llama() -> torch.nn.Module:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=100,
                     hidden_dim=128, max_seq_len=CONTEXT, max_context_len=CONTEXT,
                     use_kv_cache=True, enable_dynamic_shape=True, max_batch_size=1)
    return construct_transformer(args).eval()


def _llama_program(chunks: int | str | None = None) -> tp.Program:
    shapes = ({1: torch.export.Dim("token_dim", max=CONTEXT - 1)}, {"input_pos": {0: 1}})
    example = (torch.tensor([[2, 3, 4]]), {"input_pos": torch.tensor([0])})
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]), \
            torch.no_grad():
        program = torch.export.export(_llama(), example, dynamic_shapes=shapes, strict=True)
    return tp.compile(program.run_decompositions({}), chunks=chunks)


@pytest.fixture(scope="module")
def llama() -> tp.Program:
    pytest.importorskip("executorch")
    return _llama_program(chunks=4)


def _llama_eager(tokens: torch.Tensor, start: int = 0, prefill: torch.Tensor | None = None
                 ) -> torch.Tensor:
    model = _llama()  # a fresh cache
    with torch.no_grad():
        if prefill is not None:
            model(prefill, {"input_pos": torch.tensor([0])})
        return model(tokens, {"input_pos": torch.tensor([start])})


def test_executorchs_llama_recipe_chunks_and_equals_eager_at_every_size(llama) -> None:
    assert (llama.chunking.declined, llama.chunking.chosen.chunks) == ("", 4)
    assert llama.plan.arena_bytes < 0.7 * llama.chunking.candidates[0].arena_bytes
    for rows in (2, 31, 37, CONTEXT - 1):
        tokens = torch.randint(0, 100, (1, rows))
        got = llama.run(tokens, {"input_pos": torch.tensor([0])})
        torch.testing.assert_close(got, _llama_eager(tokens), rtol=1e-5, atol=1e-5)


def test_auto_chunks_the_recipe_whose_bound_is_prime() -> None:
    """The recipe's token dim ends at ``max_seq_len - 1`` (127 here, a prime): "auto" runs the
    attention in 16 chunks of 8 rows (one row padded at the bound), not 15 of 9 (eight rows
    padded, 1.033x the multiply-adds, over the budget: it used to decline), the MLP in 2."""
    pytest.importorskip("executorch")
    auto = _llama_program(chunks="auto")
    chosen = auto.chunking.chosen
    assert (auto.chunking.declined, chosen.per_region) == ("", (16, 2, 16, 2))
    assert chosen.overhead == pytest.approx(128 / 127, abs=2e-3)
    assert (auto.plan.arena_bytes, auto.chunking.candidates[0].arena_bytes) == (208_912, 619_792)
    tokens = torch.randint(0, 100, (1, 61))
    torch.testing.assert_close(auto.run(tokens, {"input_pos": torch.tensor([0])}),
                               _llama_eager(tokens), rtol=1e-5, atol=1e-5)


def test_executorchs_llama_recipe_decodes_after_a_chunked_prefill(llama) -> None:
    prompt, token = torch.randint(0, 100, (1, 45)), torch.tensor([[7]])
    llama.run(prompt, {"input_pos": torch.tensor([0])})  # its cache: the program's buffers
    got = llama.run(token, {"input_pos": torch.tensor([45])})
    torch.testing.assert_close(got, _llama_eager(token, 45, prompt), rtol=1e-5, atol=1e-5)


def _instructions(manager) -> int:
    return sum(len(chain.instructions)
               for chain in manager.executorch_program.execution_plan[0].chains)


def test_executorchs_llama_recipe_pte_prefills_and_decodes_equal_to_eager(llama) -> None:
    """With the loop's body once: at most 1.5x the unchunked ``.pte``'s instructions (the
    body's views of a chunk's ``ceil(S / 4)`` rows are dynamic, an ``et_view`` each)."""
    from executorch.runtime import Runtime

    from tensorplan.integrations.executorch import to_executorch

    manager = to_executorch(llama)  # kept: the loaded program reads its buffer
    assert _instructions(manager) <= 1.5 * _instructions(to_executorch(_llama_program()))
    method = Runtime.get().load_program(manager.buffer).load_method("forward")
    for rows in (2, 37, CONTEXT - 1):
        tokens = torch.randint(0, 100, (1, rows))
        got = method.execute([tokens, torch.tensor([0])])[0]
        torch.testing.assert_close(got, _llama_eager(tokens), rtol=1e-5, atol=1e-5)
    prompt, token = torch.randint(0, 100, (1, 45)), torch.tensor([[7]])
    method.execute([prompt, torch.tensor([0])])  # the cache: the method's mutable buffers
    got = method.execute([token, torch.tensor([45])])[0]  # a decode step, one chunk padded
    torch.testing.assert_close(got, _llama_eager(token, 45, prompt), rtol=1e-5, atol=1e-5)


def _static_cache_recipe_chunks_equal_eager(build: Callable[[], torch.nn.Module],
                                            lengths: tuple[int, ...]) -> None:
    """``build``'s static-cache decoder (a cache of 64), the prompt length a plain ``Dim`` on
    the ids and the cache positions, compiled in 4 chunks of 16 rows: equal to eager (a fresh
    cache each time) at each of ``lengths``."""
    seq = torch.export.Dim("seq_length_dim", max=63)
    shapes = {"input_ids": {1: seq}, "cache_position": {0: seq}}
    example = {"input_ids": torch.randint(0, 128, (1, 8)), "cache_position": torch.arange(8)}
    prog = tp.compile(build(), (), example, dynamic_shapes=shapes, chunks=4)
    assert (prog.chunking.declined, prog.chunking.chosen.chunks) == ("", 4)
    for length in lengths:
        inputs = {"input_ids": torch.randint(0, 128, (1, length)),
                  "cache_position": torch.arange(length)}
        with torch.no_grad():
            expected = build()(**inputs)
        torch.testing.assert_close(prog.run(**inputs), expected)


def test_transformers_static_cache_recipe_chunks_and_equals_eager() -> None:
    pytest.importorskip("transformers")
    _static_cache_recipe_chunks_equal_eager(_static_cache_llm, (2, 15, 31, 63))


def test_bert_with_a_plain_dim_chunks_and_equals_eager() -> None:
    pytest.importorskip("transformers")
    example = tp.zoo.example("hf_bert_dynamic")
    prog = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes,
                      chunks="auto")
    assert prog.chunking.declined == "" and prog.chunking.chosen.chunks > 1
    assert prog.plan.arena_bytes < prog.chunking.candidates[0].arena_bytes
    for rows in (2, 15, 37, 64):
        args = (torch.randint(0, 1000, (1, rows)), torch.ones(1, rows, dtype=torch.long))
        with torch.no_grad():
            expected = example.model(*args)
        for got, want in zip(prog.run(*args), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _static_cache_gpt_neox() -> torch.nn.Module:
    """transformers' static-cache decoder over a two-layer GPT-NeoX (Pythia's family: rotary
    on a quarter of each head, the attention and the MLP in parallel) with a cache of 64."""
    from transformers import GenerationConfig, GPTNeoXConfig, GPTNeoXForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4,
                           max_position_embeddings=64, rotary_pct=0.25)
    model = GPTNeoXForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=64,
        cache_config={"batch_size": 1, "max_cache_len": 64})
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=64).model


def test_a_loop_that_reads_the_new_cache_chunks_and_equals_eager() -> None:
    """GPT-NeoX's static-cache decoder: the chunked attention's loop reads the cache as the
    step wrote it, a value computed into the cache buffer's own storage. The loop body's
    input used to keep the storage the buffer's storage replaced (an internal error in
    liveness, ``KeyError``); it lives in the buffer's."""
    pytest.importorskip("transformers")
    _static_cache_recipe_chunks_equal_eager(_static_cache_gpt_neox, (2, 31, 63))
