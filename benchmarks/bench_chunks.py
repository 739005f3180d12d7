"""The transformer peak with the token rows chunk by chunk (``compile(..., chunks="auto")``) vs
without, and vs ExecuTorch's best configuration.

Usage: ``python benchmarks/bench_chunks.py [--out FILE] [--models a,b] [--runs N] [--compiles N]``

Models (transformers configs, random weights, batch 1, two layers each, small vocabularies, real
widths and lengths): BERT-base at 512 tokens, GPT-2 small at 1024, a SmolLM2-135M-shaped Llama
prefill at 512, a T5-small encoder at 512, a Whisper-tiny encoder at 1500 frames, ViT-B/16 at
224x224 (197 tokens), an OLMoE-shaped mixture of experts at 256; and fresh configs the zoo does
not have (a 4-layer BERT 512 wide at 384 tokens, a GPT-2 of 16 heads at 768, a GPT-NeoX at 640:
Pythia's family, which the zoo lacks), summarised apart; and the recipes' LLM exports. Each is
compiled with the defaults and with ``chunks="auto"``, both run on the example input and
compared with eager, timed against eager (median of ``--runs`` calls, one thread,
interleaved), the two compiles timed as the fastest of ``--compiles`` tries each, interleaved.
ExecuTorch's best configuration: the smallest arena of its "greedy" and "const-prop" lowerings
among those that load and equal eager (``common.best_result``); shipped: the chunked program
through ``to_executorch``, run in ExecuTorch's runtime.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import common
import torch
from common import ExecuTorchResult, quiet, same_outputs

import tensorplan as tp
from tensorplan.zoo import Example
from tensorplan.zoo.vision import import_torchvision

DEFAULT_RUNS = 7  # calls per program timed: 3 left a row 0.15x off between two runs
DEFAULT_COMPILES = 1  # after one untimed compile: 2 took 2 of the 21 min alone
REASON_CHARS = 80
CONFIGS = ("greedy", "const-prop")
VOCAB = 1000
TARGET = 0.30  # arena / ExecuTorch best, the text models at real lengths
TARGET_VIT, TARGET_MOE = 0.55, 0.50
TARGET_RECIPE, TARGET_RECIPE_PTE = 0.20, 0.25  # the recipes' exports (issue 47)
SYMBOLIC_SLACK = 1.05  # a dynamic program's arena over its lower bound, at every size


def _tokens(seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, seq))


def bert(layers: int, hidden: int, heads: int, seq: int, dynamic: bool = False) -> Example:
    """BERT at ``seq`` tokens; ``dynamic``: seq is 64 x blocks, 128 to ``seq``."""
    from transformers import BertConfig, BertModel

    from tensorplan.zoo.hf import EncoderOutputs
    config = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                        intermediate_size=4 * hidden, vocab_size=VOCAB,
                        max_position_embeddings=512)
    shapes = None
    if dynamic:
        rows = 64 * torch.export.Dim("blocks", min=2, max=seq // 64)
        shapes = ({1: rows}, {1: rows})
    return Example(EncoderOutputs(BertModel(config)).eval(),
                   (_tokens(seq), torch.ones(1, seq, dtype=torch.long)), dynamic_shapes=shapes)


def gpt2(hidden: int, heads: int, seq: int) -> Example:
    """GPT-2 (``hidden`` wide, ``heads`` heads, 2 layers) at ``seq`` tokens, logits only."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from tensorplan.zoo.hf import LogitsOnly
    config = GPT2Config(n_layer=2, n_embd=hidden, n_head=heads, vocab_size=VOCAB,
                        n_positions=1024)
    return Example(LogitsOnly(GPT2LMHeadModel(config)).eval(), (_tokens(seq),))


def _llama() -> Example:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tensorplan.zoo.hf import LogitsOnly
    config = LlamaConfig(num_hidden_layers=2, hidden_size=576, num_attention_heads=9,
                         num_key_value_heads=3, intermediate_size=1536, vocab_size=VOCAB)
    return Example(LogitsOnly(LlamaForCausalLM(config)).eval(), (_tokens(512),))


def _t5_encoder() -> Example:
    from transformers import T5Config, T5EncoderModel

    from tensorplan.zoo.hf import LogitsOnly
    config = T5Config(num_layers=2, d_model=512, d_ff=2048, num_heads=8, d_kv=64,
                      vocab_size=VOCAB)
    return Example(LogitsOnly(T5EncoderModel(config)).eval(), (_tokens(512),))


def _whisper_encoder() -> Example:
    from transformers import WhisperConfig, WhisperModel

    from tensorplan.zoo.hf import LogitsOnly
    config = WhisperConfig(encoder_layers=2, decoder_layers=1, d_model=384,
                           encoder_attention_heads=6, encoder_ffn_dim=1536, vocab_size=VOCAB,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           decoder_start_token_id=1)
    return Example(LogitsOnly(WhisperModel(config).encoder).eval(), (torch.randn(1, 80, 3000),))


def _vit() -> Example:
    from transformers import ViTConfig, ViTModel

    from tensorplan.zoo.hf import LogitsOnly
    config = ViTConfig(num_hidden_layers=2, hidden_size=768, num_attention_heads=12,
                       intermediate_size=3072, image_size=224, patch_size=16)
    return Example(LogitsOnly(ViTModel(config)).eval(), (torch.randn(1, 3, 224, 224),))


def gpt_neox(seq: int) -> Example:
    """GPT-NeoX (Pythia's family, which the zoo lacks), 2 layers 512 wide, rotary on a quarter
    of each head, at ``seq`` tokens."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from tensorplan.zoo.hf import LogitsOnly
    config = GPTNeoXConfig(num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
                           intermediate_size=2048, vocab_size=VOCAB, max_position_embeddings=1024,
                           rotary_pct=0.25)
    return Example(LogitsOnly(GPTNeoXForCausalLM(config)).eval(), (_tokens(seq),))


def _moe(experts: str) -> Example:
    """OLMoE, 2 layers of top-2 of 8 experts at 256 tokens, the experts run by transformers'
    ``experts`` implementation: ``batched_mm`` gathers each token's expert weights (the zoo's
    choice, which ExecuTorch lowers), ``grouped_mm`` counts tokens per expert with
    ``aten.histc``, which ExecuTorch's lowering refuses."""
    from transformers import OlmoeConfig, OlmoeForCausalLM

    from tensorplan.zoo.hf import LogitsOnly
    config = OlmoeConfig(num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
                         num_key_value_heads=8, intermediate_size=256, num_experts=8,
                         num_experts_per_tok=2, vocab_size=VOCAB, experts_implementation=experts)
    return Example(LogitsOnly(OlmoeForCausalLM(config)).eval(), (_tokens(256),))


def _token_dim(name: str, largest: int, smallest: int | None = None) -> torch.export.Dim:
    return torch.export.Dim(name, max=largest) if smallest is None else \
        torch.export.Dim(name, min=smallest, max=largest)


def _executorch_llama(context: int, dim: int = 576, heads: int = 9, kv_heads: int = 3,
                      hidden: int = 1536) -> Example:
    """ExecuTorch's own Llama (``construct_transformer``, SmolLM2-135M-shaped by default, 2
    layers) with its KV cache of ``context`` positions, exported as ``LLMEdgeManager`` does:
    the tokens' dim ``Dim("token_dim", max=context - 1)``, ``input_pos`` of one element; the
    example is a prompt at the bound."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    args = ModelArgs(dim=dim, n_layers=2, n_heads=heads, n_kv_heads=kv_heads,
                     vocab_size=VOCAB, hidden_dim=hidden, max_seq_len=context,
                     max_context_len=context, use_kv_cache=True, enable_dynamic_shape=True,
                     max_batch_size=1)
    shapes = ({1: _token_dim("token_dim", context - 1)}, {"input_pos": {0: 1}})
    return Example(construct_transformer(args).eval(),
                   (_tokens(context - 1), {"input_pos": torch.tensor([0])}),
                   dynamic_shapes=shapes)


def _static_cache_llama(context: int, hidden: int = 576, heads: int = 9, kv_heads: int = 3,
                        intermediate: int = 1536) -> Example:
    """transformers' ``TorchExportableModuleForDecoderOnlyLM`` over a Llama with a static cache
    of ``context`` positions, the prompt length a plain ``Dim`` on the ids and the cache
    positions (optimum-executorch's causal-LM recipe; the zoo's ``StaticCacheStep`` wrapper
    lets a non-strict export see the cache); the example is a prompt at the bound."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=2, hidden_size=hidden, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, intermediate_size=intermediate,
                         vocab_size=VOCAB, max_position_embeddings=context)
    return _static_cache_decoder(LlamaForCausalLM(config), context)


def static_cache_gpt_neox(context: int) -> Example:
    """``_static_cache_llama``'s recipe over a GPT-NeoX (Pythia's family, which the zoo lacks:
    rotary on a quarter of each head, attention and MLP in parallel), 2 layers 384 wide."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(num_hidden_layers=2, hidden_size=384, num_attention_heads=6,
                           intermediate_size=1536, vocab_size=VOCAB,
                           max_position_embeddings=context, rotary_pct=0.25)
    return _static_cache_decoder(GPTNeoXForCausalLM(config), context)


def _static_cache_decoder(model: torch.nn.Module, context: int) -> Example:
    """transformers' static-cache export of a causal LM ``model``: a cache of ``context``
    positions, the prompt length a plain ``Dim``, the example a prompt at the bound."""
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    from tensorplan.zoo.hf import StaticCacheStep
    model = model.eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": context})
    module = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=context)
    seq = _token_dim("seq_length_dim", context - 1)
    return Example(StaticCacheStep(module.model).eval(),
                   (_tokens(context - 1), torch.arange(context - 1)),
                   dynamic_shapes=({1: seq}, {0: seq}))


def _plain(build: Callable[[], Example], smallest: int) -> Example:
    """``build``'s example with its token dim (dim 1 of every input) a plain ``Dim`` from
    ``smallest`` to its example's length."""
    example = build()
    seq = _token_dim("seq", example.args[0].shape[1], smallest)
    return Example(example.model, example.args,
                   dynamic_shapes=tuple({1: seq} for _ in example.args))


MODELS: dict[str, Callable[[], Example]] = {
    "bert_base_512": lambda: bert(2, 768, 12, 512),
    "bert_base_512_dynamic": lambda: bert(2, 768, 12, 512, dynamic=True),
    "gpt2_small_1024": lambda: gpt2(768, 12, 1024),
    "llama_smollm2_512": _llama,
    "t5_small_encoder_512": _t5_encoder,
    "whisper_tiny_encoder_1500": _whisper_encoder,
    "vit_b16_224": _vit,
    "moe_olmoe_256": lambda: _moe("batched_mm"),
    "moe_olmoe_256_grouped_mm": lambda: _moe("grouped_mm"),
    "fresh_bert_4x512_384": lambda: bert(4, 512, 8, 384),
    "fresh_gpt2_16h_768": lambda: gpt2(1024, 16, 768),
    "fresh_gpt_neox_640": lambda: gpt_neox(640),
    "recipe_executorch_llama_1024": lambda: _executorch_llama(1024),
    "recipe_executorch_llama_2048": lambda: _executorch_llama(2048),
    "recipe_static_cache_llama_1024": lambda: _static_cache_llama(1024),
    "plain_gpt2_small_1024": lambda: _plain(lambda: gpt2(768, 12, 1024), 2),
    "plain_bert_base_512": lambda: _plain(lambda: bert(2, 768, 12, 512), 8),
    "fresh_recipe_executorch_llama_768": lambda: _executorch_llama(768, 512, 8, 2, 1408),
    "fresh_plain_gpt2_16h_640": lambda: _plain(lambda: gpt2(1024, 16, 640), 2),
}
RECIPES = tuple(name for name in MODELS if name.startswith(("recipe_", "plain_",
                                                             "fresh_recipe_", "fresh_plain_")))
TEXT = ("bert_base_512", "bert_base_512_dynamic", "gpt2_small_1024", "llama_smollm2_512",
        "t5_small_encoder_512", "whisper_tiny_encoder_1500")


@dataclass(frozen=True)
class Row:
    """One model's measurements."""

    model: str
    off: tp.Program
    on: tp.Program
    seconds: tuple[float, float]  # compile time: defaults, chunks="auto"
    executorch: tuple[ExecuTorchResult, ...]
    shipped: ExecuTorchResult | None  # the chunked program's .pte, None without executorch
    equal: bool  # both programs equal eager
    times: dict[str, float]  # median ms: eager, off, on


def _compiled(example: Example, compiles: int
              ) -> tuple[tp.Program, tp.Program, tuple[float, float]]:
    """The program compiled with the defaults and with ``chunks="auto"``, and the fastest of
    ``compiles`` tries of each (interleaved, after one untimed compile: the process's one-time
    costs count in neither)."""
    seconds: tuple[list[float], list[float]] = ([], [])
    with quiet():
        tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
        for _ in range(compiles):
            start = time.perf_counter()
            off = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
            middle = time.perf_counter()
            on = tp.compile(example.model, example.args,
                            dynamic_shapes=example.dynamic_shapes, chunks="auto")
            seconds[0].append(middle - start)
            seconds[1].append(time.perf_counter() - middle)
    return off, on, (min(seconds[0]), min(seconds[1]))


def measure(name: str, build: Callable[[], Example], runs: int, compiles: int) -> Row:
    """Compile, run and time one model with chunks off and on; lower it with ExecuTorch."""
    torch.manual_seed(0)
    example = build()
    off, on, seconds = _compiled(example, compiles)
    with torch.no_grad():
        expected = example.model(*example.args)
        equal = same_outputs(expected, off.run(*example.args)) and \
            same_outputs(expected, on.run(*example.args))
    results = common.executorch_results(example, expected, CONFIGS, REASON_CHARS,
                                        best_only=True)
    shipped = common.shipped_result(on, example, expected, REASON_CHARS) \
        if common.executorch_installed() else None
    times = common.medians({"eager": lambda: example.model(*example.args),
                            "off": lambda: off.run(*example.args),
                            "on": lambda: on.run(*example.args)}, runs)
    return Row(name, off, on, seconds, results, shipped, equal, times)


def _shipped_cell(result: ExecuTorchResult | None, best: int | None) -> str:
    if result is None:
        return "not measured"
    if result.failed is not None or result.arena is None:
        return f"{result.failed}: {result.reason}"
    return f"{result.arena} ({common.ratio(result.arena, best)})"


def table(rows: Sequence[Row]) -> str:
    header = ["model", "arena, chunks off (B)", "arena, chunks auto (B)", "on / off",
              "chunks", "ExecuTorch best (B)", "on / ExecuTorch best",
              "shipped .pte, chunks auto (B; / ExecuTorch best)", "multiply-adds",
              "equal to eager", "eager ms; run / eager off → on", "compile s off → auto"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        chosen, best = row.on.chunking.chosen, common.best_result(row.executorch)
        best_arena = best.arena if best else None
        lines.append("| " + " | ".join([
            row.model, str(row.off.plan.arena_bytes), str(row.on.plan.arena_bytes),
            common.ratio(row.on.plan.arena_bytes, row.off.plan.arena_bytes),
            _chunks_cell(row.on.chunking),
            f"{best_arena} ({best.config})" if best else "none loads",
            common.ratio(row.on.plan.arena_bytes, best_arena),
            _shipped_cell(row.shipped, best_arena), f"{chosen.overhead:.2f}x",
            "yes" if row.equal else "NO",
            f"{row.times['eager']:.1f}; {common.ratio(row.times['off'], row.times['eager'])} → "
            f"{common.ratio(row.times['on'], row.times['eager'])}",
            f"{row.seconds[0]:.1f} → {row.seconds[1]:.1f} "
            f"({common.ratio(row.seconds[1], row.seconds[0])})"]) + " |")
    return "\n".join(lines) + "\n"


def _chunks_cell(chunking: Any) -> str:
    """The chunks of each region (``32 x2, 4 x2``: two regions in 32, two in 4), or why
    nothing was chunked."""
    if chunking.chosen.chunks == 1:
        return f"1 ({chunking.declined})"
    counts = collections.Counter(chunking.chosen.per_region)
    return ", ".join(f"{n} x{times}" for n, times in sorted(counts.items(), reverse=True))


def _ratios(rows: Sequence[Row]) -> dict[str, float]:
    ratios = {}
    for row in rows:
        best = common.best_result(row.executorch)
        if best and best.arena:
            ratios[row.model] = row.on.plan.arena_bytes / best.arena
    return ratios


def _recipes_clause(rows: Sequence[Row], ratios: dict[str, float]) -> str:
    """The recipes' exports' medians: the plan's and the shipped ``.pte``'s."""
    plans = [ratios[row.model] for row in rows if row.model in RECIPES and row.model in ratios]
    shipped = []
    for row in rows:
        best = common.best_result(row.executorch)
        if row.model in RECIPES and best and best.arena and row.shipped and row.shipped.arena:
            shipped.append(row.shipped.arena / best.arena)
    if not plans:
        return ""
    pte = f", their `.pte` a median {statistics.median(shipped):.2f}x (target <= " \
        f"{TARGET_RECIPE_PTE:.2f}x)" if shipped else ""
    return (f"the recipes' exports (a plain `Dim`, a KV cache: chunked as a loop) plan a median "
            f"{statistics.median(plans):.2f}x of ExecuTorch's best (target <= "
            f"{TARGET_RECIPE:.2f}x){pte}; ")


def symbolic_worst(program: tp.Program) -> tuple[float, int, int] | None:
    """For a program with one dynamic dim: its arena over its lower bound at the size of its
    range where that is largest (every size checked), that size, and how many storages its
    symbolic plan holds at their bound (each with its reason in ``plan.symbolic.held``);
    None for a static program."""
    symbolic = program.plan.symbolic
    if symbolic is None or len(symbolic.dims) != 1:
        return None
    (dim,) = symbolic.dims
    worst = max((program.plan.arena_bytes_at(**{dim.name: size})
                 / program.plan.lower_bound_at(**{dim.name: size}), size)
                for size in range(max(dim.lower, 1), dim.upper + 1))
    return worst[0], worst[1], len(symbolic.held)


def _symbolic_clause(rows: Sequence[Row]) -> str:
    found = {row.model: symbolic_worst(row.on) for row in rows}
    found = {name: worst for name, worst in found.items() if worst is not None}
    if not found:
        return ""
    above = [f"{name} {ratio:.3f}x at {size}, {held} held" for name, (ratio, size, held)
             in found.items() if ratio > SYMBOLIC_SLACK]
    return (f"the {len(found)} chunked programs with a dynamic dim plan at most "
            f"{max(r for r, _, _ in found.values()):.3f}x their lower bound at any size of the "
            f"range (target <= {SYMBOLIC_SLACK:.2f}x, or the values held at their bound listed"
            f"{': ' + ', '.join(above) if above else ''}); ")


def summary(rows: Sequence[Row]) -> str:
    ratios = _ratios(rows)
    if not ratios:
        return "No ExecuTorch figures: no summary.\n"
    targets = {name: TARGET_VIT if name.startswith("vit") else
               TARGET_MOE if name.startswith("moe") else
               TARGET_RECIPE if name in RECIPES else TARGET for name in ratios}
    missed = sorted(f"{name} ({ratios[name]:.2f}x)" for name in ratios
                    if ratios[name] > targets[name])
    text = [ratios[name] for name in TEXT if name in ratios]
    larger = [row.model for row in rows if row.on.plan.arena_bytes > row.off.plan.arena_bytes]
    text_clause = (f"the text models at real lengths plan a median {statistics.median(text):.2f}x "
                   f"of ExecuTorch's best (target <= {TARGET:.2f}x); " if text else "")
    fresh = [ratios[name] for name in common.by_group(ratios, str).get("fresh", [])]
    text_clause += (f"the {len(fresh)} fresh configs (other widths, depths and lengths, and "
                    f"GPT-NeoX, a family the zoo lacks) a median "
                    f"{statistics.median(fresh):.2f}x; " if fresh else "")
    slower = [row.times["on"] / row.times["off"] for row in rows]
    compiles = [row.seconds[1] / row.seconds[0] for row in rows]
    return (f"**Summary**: with `chunks=\"auto\"`, {text_clause}"
            f"{_recipes_clause(rows, ratios)}{_symbolic_clause(rows)}over all {len(ratios)} models "
            f"{statistics.median(ratios.values()):.2f}x; `Program.run` chunked over unchunked "
            f"a median {statistics.median(slower):.2f}x (at most {max(slower):.2f}x); "
            f"compile chunked over unchunked a median {statistics.median(compiles):.2f}x (at "
            f"most {max(compiles):.2f}x, {rows[compiles.index(max(compiles))].model}); "
            f"above their targets: "
            f"{', '.join(missed) or 'none'}; larger than without chunks: "
            f"{', '.join(larger) or 'none'}; every program equal to eager: "
            f"{'yes' if all(row.equal for row in rows) else 'NO'}.\n")


# (K, N) of the products: BERT-base's (the zoo's), then a 16-head 1024-wide GPT-2's and a
# SmolLM2-shaped Llama's MLP (widths the zoo does not have)
PRODUCT_SHAPES = ((768, 768), (768, 3072), (3072, 768), (1024, 1024), (1024, 4096),
                  (4096, 1024), (576, 1536), (1536, 576))
PRODUCT_ROWS, CHUNK_ROWS = 512, (16, 32, 64, 128)
PRODUCT_RUNS = 5  # the products are timed over at least this many calls


def _addmm_in_chunks(bias: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                     out: torch.Tensor, rows: int) -> float:
    """Seconds to write ``x @ weight.T + bias`` into ``out`` one ``addmm.out`` per ``rows``
    rows."""
    start = time.perf_counter()
    for first in range(0, x.shape[0], rows):
        torch.addmm(bias, x[first:first + rows], weight.t(), out=out[first:first + rows])
    return time.perf_counter() - start


def product_rows(runs: int) -> dict[tuple[int, int], dict[int, float]]:
    """For each ``(K, N)`` of ``PRODUCT_SHAPES``: the time of a ``PRODUCT_ROWS x K x N``
    ``addmm`` made in chunks of each of ``CHUNK_ROWS`` rows (one ``addmm.out`` per chunk,
    as a chunked program runs it in the Python runtime) over the time of one ``addmm.out`` of
    all its rows (median of ``runs`` interleaved calls after one untimed, the caller's
    threads)."""
    found = {}
    for k, n in PRODUCT_SHAPES:
        tensors = (torch.randn(n), torch.randn(PRODUCT_ROWS, k), torch.randn(n, k),
                   torch.empty(PRODUCT_ROWS, n))
        times: dict[int, list[float]] = {rows: [] for rows in (PRODUCT_ROWS, *CHUNK_ROWS)}
        for round_ in range(runs + 1):
            for rows, taken in times.items():
                seconds = _addmm_in_chunks(*tensors, rows)
                if round_:
                    taken.append(seconds)
        whole = statistics.median(times[PRODUCT_ROWS])
        found[(k, n)] = {rows: statistics.median(times[rows]) / whole for rows in CHUNK_ROWS}
    return found


def product_table(found: dict[tuple[int, int], dict[int, float]], runs: int) -> str:
    """The ``product_rows`` figures as a markdown table, with what they explain."""
    lines = [f"Why a chunked program runs slower in the Python runtime: torch's `addmm.out` "
             f"(MKL, one thread) over {PRODUCT_ROWS} rows made in chunks of r rows, over one "
             f"call on all of them (median of {runs} interleaved calls, after one untimed). "
             f"The `.pte` in ExecuTorch's runtime: `bench_products.py`'s model rows.\n",
             "| K x N | " + " | ".join(f"r = {r}" for r in CHUNK_ROWS) + " |",
             "|---|" + "---|" * len(CHUNK_ROWS)]
    for (k, n), ratios in found.items():
        lines.append(f"| {k} x {n} | " + " | ".join(f"{ratios[r]:.2f}x" for r in CHUNK_ROWS)
                     + " |")
    return "\n".join(lines) + "\n"


def report(rows: Sequence[Row], runs: int, compiles: int,
           products: dict[tuple[int, int], dict[int, float]], product_runs: int) -> str:
    return "".join([
        summary(rows), "\n",
        "Arena: `tp.compile` with the defaults and with `chunks=\"auto\"` (the count its estimate "
        "ranks first, planned; the program as exported when that is not smaller); "
        "multiply-adds: the chunked program's matmuls over the original's. ExecuTorch best: the "
        "smaller arena of its greedy and const-prop lowerings among those that load and equal "
        "eager. Shipped: the chunked program through `to_executorch`, run in ExecuTorch's "
        f"runtime and equal to eager. Run: eager's median ms over {runs} calls, then "
        "`Program.run` / eager without and with chunks (one thread, interleaved). Compile: "
        + (f"the fastest of {compiles} tries of each, interleaved" if compiles > 1 else
           "one try of each") + ", after an untimed compile.\n\n",
        table(rows), "\n" if products else "",
        product_table(products, product_runs) if products else ""])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--compiles", type=int, default=DEFAULT_COMPILES,
                        help="time each compile as the fastest of this many tries")
    options = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    import_torchvision()
    names = options.models.split(",") if options.models else list(MODELS)
    rows = []
    for name in names:
        rows.append(measure(name, MODELS[name], options.runs, options.compiles))
        print(f"{name}: done", file=sys.stderr, flush=True)
    product_runs = max(options.runs, PRODUCT_RUNS)
    products = product_rows(product_runs)
    common.emit(report(rows, options.runs, options.compiles, products, product_runs),
                options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
