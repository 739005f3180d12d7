"""Built-in example models, each with example inputs and dynamic shapes (``zoo:NAME`` targets).

They are small, deterministic (seeded random weights) and cover what a deployment plan must
handle: dense layers, convolutions in channels_last, attention with a dynamic sequence length,
and a module whose buffer is updated in place.
"""

from __future__ import annotations

import difflib
import importlib

import torch
from torch import nn
from torch.export import Dim

from tensorplan.errors import InputError
from tensorplan.zoo import catalog
from tensorplan.zoo.base import Example

__all__ = ["Example", "example"]


class MLP(nn.Module):
    """Two linear layers with a GELU between them."""

    def __init__(self, d_in: int = 64, d_hidden: int = 256, d_out: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class ConvNet(nn.Module):
    """Conv-BN-ReLU blocks, a residual add and global pooling, meant for channels_last input."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1),
                                   nn.BatchNorm2d(channels), nn.ReLU(),
                                   nn.Conv2d(channels, channels, 3, padding=1))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = torch.relu(y + self.block(y))
        return self.head(y.mean(dim=(2, 3)))


class TinyGPT(nn.Module):
    """A two-layer causal transformer language model (pre-norm, learned positions)."""

    def __init__(self, vocab: int = 256, d_model: int = 64, heads: int = 4, layers: int = 2,
                 max_len: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(_Block(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


class _Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class KVCache(nn.Module):
    """One attention step that writes its key/value into a cache buffer at ``pos`` in place."""

    def __init__(self, d_model: int = 32, max_len: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.register_buffer("k_cache", torch.zeros(max_len, d_model))
        self.register_buffer("v_cache", torch.zeros(max_len, d_model))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        self.k_cache.index_copy_(0, pos, k)
        self.v_cache.index_copy_(0, pos, v)
        scores = (q @ self.k_cache.T).softmax(dim=-1)
        return scores @ self.v_cache


def _mlp() -> Example:
    return Example(MLP().eval(), (torch.randn(8, 64),))


def _convnet() -> Example:
    x = torch.randn(2, 3, 32, 32).to(memory_format=torch.channels_last)
    return Example(ConvNet().eval().to(memory_format=torch.channels_last), (x,))


def _tiny_gpt() -> Example:
    tokens = torch.randint(0, 256, (1, 32))
    return Example(TinyGPT().eval(), (tokens,),
                   dynamic_shapes=({1: Dim("seq", min=2, max=128)},))


def _kv_cache() -> Example:
    return Example(KVCache().eval(), (torch.randn(1, 32), torch.tensor([0])))


def example(name: str, seed: int = 0) -> Example:
    """Build the built-in model ``name`` with weights and inputs drawn from ``seed``. Raises
    ``InputError`` for an unknown name, with the closest names first ("did you mean")."""
    entries = catalog.installed()
    if name not in entries:
        close = difflib.get_close_matches(name.replace("-", "_"), sorted(entries), n=3,
                                          cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise InputError(f"zoo: no built-in model {name!r}; {hint}choose one of "
                         f"{', '.join(sorted(entries))}")
    entry = entries[name]
    torch.manual_seed(seed)
    return getattr(importlib.import_module(entry.module), entry.function)(*entry.args)
