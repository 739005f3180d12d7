"""Symbolic plans: the arena a run needs at the sizes it has, vs the plan at the upper bounds.

Usage: ``python benchmarks/bench_symbolic.py [--out FILE] [--models a,b] [--runs N]``

Per dynamic model, the program is compiled once (``tp.compile``; the symbolic plan is part of
it). At each dim at 1/8, 1/4, 1/2 and all of its range (every combination of the dims' sizes,
the corners of their box included): the
symbolic arena there (``plan.arena_bytes_at``), the lower bound there
(``plan.lower_bound_at``: the most aligned bytes live at one step at those sizes), their
ratio, and today's arena (the one plan at the upper bounds, which is what a run held before).
Run: the median ms of eager, of a runner whose arena is allocated at the bounds
(``runner(arena="upper")``) and of one grown to that size (``runner()``, the default), one
thread, interleaved; every output compared with eager. Compile: the whole ``tp.compile`` and, within
it, the symbolic stage (stacking and its proof), timed alone on the same plan.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import common
import torch
from common import quiet, same_outputs
from torch.export import Dim

import tensorplan as tp
from tensorplan import zoo
from tensorplan.plan.symbolic.stack import with_symbolic
from tensorplan.specs.spec import canonical
from tensorplan.zoo.base import Example

PARTS = (8, 4, 2, 1)   # each dim at 1/N of its upper bound (at least its lower bound)
TARGET_RATIO = 1.05    # arena(size) / lower bound(size), at every size
DEFAULT_RUNS = 10


def _llama_dynamic() -> Example:
    example = zoo.example("hf_llama")
    return Example(example.model, (example.args[0][:, :16],),
                   dynamic_shapes=({1: Dim("seq", min=2, max=example.args[0].shape[1])},))


def _batch_dynamic(name: str, batch: int) -> Callable[[], Example]:
    def build() -> Example:
        example = zoo.example(name)
        x = example.args[0]
        return Example(example.model, (torch.cat([x] * 2)[:2],),
                       dynamic_shapes=({0: Dim("batch", min=1, max=batch)},))
    return build


VOCAB = 1000


def _fresh_llama() -> Example:
    """A Llama the zoo does not hold: 3 layers, hidden 192, 6 query over 2 key-value heads,
    the sequence dynamic in [2, 128]."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tensorplan.zoo.hf import LogitsOnly
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=192, intermediate_size=512,
                         num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2,
                         max_position_embeddings=128, use_cache=False)
    return Example(LogitsOnly(LlamaForCausalLM(config)).eval(),
                   (torch.randint(0, VOCAB, (1, 32)),),
                   dynamic_shapes=({1: Dim("seq", min=2, max=128)},))


def _fresh_distilbert() -> Example:
    """A DistilBERT: 2 layers, dim 192, 6 heads, the sequence dynamic in [2, 96]."""
    from transformers import DistilBertConfig, DistilBertModel

    from tensorplan.zoo.hf import LogitsOnly
    config = DistilBertConfig(vocab_size=VOCAB, dim=192, n_heads=6, n_layers=2,
                              hidden_dim=768, max_position_embeddings=96)
    return Example(LogitsOnly(DistilBertModel(config)).eval(),
                   (torch.randint(0, VOCAB, (1, 24)),),
                   dynamic_shapes=({1: Dim("seq", min=2, max=96)},))


def _fresh_gpt_neox() -> Example:
    """A GPT-NeoX (Pythia's family, which the zoo lacks): 2 layers, hidden 160, 5 heads with
    rotary on half of each, the sequence dynamic in [2, 160]."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from tensorplan.zoo.hf import LogitsOnly
    config = GPTNeoXConfig(vocab_size=VOCAB, hidden_size=160, num_attention_heads=5,
                           intermediate_size=640, num_hidden_layers=2,
                           max_position_embeddings=160, rotary_pct=0.5, use_cache=False)
    return Example(LogitsOnly(GPTNeoXForCausalLM(config)).eval(),
                   (torch.randint(0, VOCAB, (1, 40)),),
                   dynamic_shapes=({1: Dim("seq", min=2, max=160)},))


def _fresh_bert_two_dims() -> Example:
    """A BERT with two dynamic dims: 2 layers, hidden 96, 3 heads, batch in [1, 4] and the
    sequence in [8, 48]."""
    from transformers import BertConfig, BertModel

    from tensorplan.zoo.hf import EncoderOutputs
    config = BertConfig(vocab_size=VOCAB, hidden_size=96, num_hidden_layers=2,
                        num_attention_heads=3, intermediate_size=384,
                        max_position_embeddings=64)
    batch, seq = Dim("batch", min=1, max=4), Dim("seq", min=8, max=48)
    ids = torch.randint(0, VOCAB, (2, 24))
    return Example(EncoderOutputs(BertModel(config)).eval(),
                   (ids, torch.ones_like(ids)),
                   dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))


MODELS: dict[str, Callable[[], Example]] = {
    "tiny_gpt": lambda: zoo.example("tiny_gpt"),
    "hf_gpt2_dynamic": lambda: zoo.example("hf_gpt2_dynamic"),
    "hf_bert_dynamic": lambda: zoo.example("hf_bert_dynamic"),
    "hf_bert_batch_dynamic": lambda: zoo.example("hf_bert_batch_dynamic"),
    "hf_llama (dynamic seq)": _llama_dynamic,
    "convnet (dynamic batch)": _batch_dynamic("convnet", 8),
    "hf_mobilenet_v2 (dynamic batch)": _batch_dynamic("hf_mobilenet_v2", 4),
    "fresh_llama_192 (dynamic seq)": _fresh_llama,
    "fresh_distilbert_192 (dynamic seq)": _fresh_distilbert,
    "fresh_bert_96 (dynamic batch and seq)": _fresh_bert_two_dims,
    "fresh_gpt_neox_160 (dynamic seq)": _fresh_gpt_neox,
}


@dataclass(frozen=True)
class Point:
    """One model at one set of sizes."""

    sizes: dict[str, int]
    arena: int
    bound: int
    equal: bool
    times: dict[str, float]  # median ms: eager, upper, grow


@dataclass(frozen=True)
class Row:
    name: str
    program: tp.Program
    compile_seconds: float
    symbolic_seconds: float
    points: list[Point]


def _resized(tensor: torch.Tensor, sizes: dict[int, int]) -> torch.Tensor:
    """``tensor`` with dim ``d`` made ``sizes[d]`` long: tiled, then cut (token ids and masks
    stay valid; the memory format is kept)."""
    for dim, size in sizes.items():
        repeats = -(-size // tensor.shape[dim])
        tensor = torch.cat([tensor] * repeats, dim).narrow(dim, 0, size)
    if tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last):
        return tensor.contiguous(memory_format=torch.channels_last)
    return tensor.contiguous()


def inputs_at(program: tp.Program, example: Example, sizes: dict[str, int]) -> tuple:
    """The example inputs resized to ``sizes`` (by Dim name) along their dynamic dims."""
    names = {d.symbol: d.name for d in program.plan.symbolic.dims}
    inputs = []
    for name, arg in zip(program.roles.user_inputs, example.args, strict=True):
        spec = program.specs.spec_of(name)
        dims = {i: sizes[names[str(canonical(s))]] for i, s in enumerate(spec.sym_shape)
                if str(canonical(s)) in names}
        keep_last = arg.is_contiguous(memory_format=torch.channels_last) and arg.dim() == 4
        resized = _resized(arg, dims)
        inputs.append(resized.contiguous(memory_format=torch.channels_last) if keep_last
                      else resized)
    return tuple(inputs)


def _sweep(program: tp.Program) -> list[dict[str, int]]:
    """Every combination of each dim at 1/8, 1/4, 1/2 and all of its upper bound (at least
    its lower bound): the corners of the dims' box among them; each set of sizes once."""
    dims = program.plan.symbolic.dims
    found = []
    for parts in itertools.product(PARTS, repeat=len(dims)):
        sizes = {d.name: max(d.lower, d.upper // part) for d, part in zip(dims, parts,
                                                                           strict=True)}
        if sizes not in found:
            found.append(sizes)
    return found


def _point(program: tp.Program, example: Example, sizes: dict[str, int], runs: int) -> Point:
    """One model at one set of sizes: the arena and bound there, its runs against eager."""
    args = inputs_at(program, example, sizes)
    grown, upper = program.runner(arena="grow"), program.runner(arena="upper")
    with torch.no_grad():
        expected = example.model(*args)
    equal = same_outputs(expected, upper.run(*args)) and same_outputs(expected, grown.run(*args))
    times = common.medians({"eager": lambda: example.model(*args),
                            "upper": lambda: upper.run(*args),
                            "grow": lambda: grown.run(*args)}, runs)
    assert grown.arena.nbytes == program.plan.arena_bytes_at(**sizes)
    return Point(sizes, program.plan.arena_bytes_at(**sizes), program.plan.lower_bound_at(**sizes),
                 equal, times)


def measure(name: str, build: Callable[[], Example], runs: int) -> Row:
    """Compile one model, time its symbolic stage, and measure it at each size."""
    example = build()
    with quiet():
        start = time.perf_counter()
        program = tp.compile(example.model, example.args, example.kwargs,
                             dynamic_shapes=example.dynamic_shapes)
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        with_symbolic(dataclasses.replace(program.plan, symbolic=None),
                      program.exported_program, program.specs, program.alias, program.roles)
        symbolic_seconds = time.perf_counter() - start
    points = [_point(program, example, sizes, runs) for sizes in _sweep(program)]
    return Row(name, program, compile_seconds, symbolic_seconds, points)


def table(rows: Sequence[Row]) -> str:
    header = ["model", "sizes", "symbolic arena", "lower bound there", "arena / bound",
              "today's arena (upper bounds)", "arena / today's", "equal eager",
              "eager ms", "run / eager: upper, grow"]
    lines = []
    for row in rows:
        upper = row.program.plan.arena_bytes
        for p in row.points:
            sizes = ", ".join(f"{d}={v}" for d, v in sorted(p.sizes.items()))
            t = p.times
            lines.append([row.name, sizes, f"{p.arena:,}", f"{p.bound:,}",
                          f"{p.arena / p.bound:.3f}", f"{upper:,}", f"{p.arena / upper:.2f}x",
                          "yes" if p.equal else "NO", f"{t['eager']:.2f}",
                          f"{t['upper'] / t['eager']:.2f}x, {t['grow'] / t['eager']:.2f}x"])
    return common.markdown(header, lines)


def compile_table(rows: Sequence[Row]) -> str:
    lines = [[r.name, ", ".join(f"{d.name} in [{d.lower}, {d.upper}]"
                                for d in r.program.plan.symbolic.dims),
              str(len(r.program.plan.storages)), str(len(r.program.plan.symbolic.held)),
              f"{r.compile_seconds:.1f}", f"{r.symbolic_seconds:.2f}"] for r in rows]
    return common.markdown(["model", "dims", "storages", "held at their bound",
                            "compile s", "of which symbolic s"], lines)


def _worst(rows: Sequence[Row]) -> str:
    """The largest arena / bound over ``rows``' sizes, and where it is."""
    ratio, where = max(((p.arena / p.bound, f"{r.name} at "
                         + ", ".join(f"{d}={v}" for d, v in sorted(p.sizes.items())))
                        for r in rows for p in r.points), key=lambda item: item[0])
    return f"{ratio:.3f}x ({where})"


def _above(rows: Sequence[Row]) -> str:
    """The models with a size whose arena is above ``TARGET_RATIO`` times its bound."""
    return ", ".join(r.name for r in rows
                     if any(p.arena > TARGET_RATIO * p.bound for p in r.points)) or "none"


def report(rows: Sequence[Row], runs: int) -> str:
    points = [(r, p) for r in rows for p in r.points]
    worst = max(p.arena / p.bound for _, p in points)
    at_upper = all(r.points[-1].arena <= r.program.plan.arena_bytes for r in rows)
    equal = all(p.equal for _, p in points)
    upper_faster = sum(p.times["upper"] < p.times["grow"] for _, p in points)
    labels = {"zoo": "the zoo's", "fresh": "the fresh configs'"}
    groups = "; ".join(f"{labels[key]}: at most {_worst(group)}" for key, group in
                       common.by_group(rows, lambda row: row.name).items())
    return "".join([
        f"**Summary**: over {len(rows)} dynamic models and {len(points)} sizes (every "
        f"combination of each dim's sizes), the symbolic arena over the lower bound at its "
        f"size is {groups} (target <= {TARGET_RATIO} at every size: "
        f"{'met' if worst <= TARGET_RATIO else 'MISSED'}; above it: {_above(rows)}); at the "
        f"upper bounds it equals today's plan or is smaller: {'yes' if at_upper else 'NO'}; "
        f"every run equals eager: {'yes' if equal else 'NO'}. The grown arena (the default "
        f"runner) ran as fast as or faster than the one at the bounds at "
        f"{len(points) - upper_faster} of {len(points)} sizes.\n\n",
        __doc__.split("\n\n", 2)[2].replace("\n", " ").strip(),
        f" Medians over {runs} calls.\n\n", table(rows), "\n\n", compile_table(rows), "\n"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the markdown table to this file")
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    options = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    names = options.models.split(",") if options.models else list(MODELS)
    rows = []
    for name in names:
        rows.append(measure(name, MODELS[name], options.runs))
        print(f"{name}: done", file=sys.stderr, flush=True)
    common.emit(report(rows, options.runs), options.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
