"""Copies that change nothing are dropped before ExecuTorch's lowering (``identities.py``): the
``.pte`` reads their input instead, moves fewer bytes, and still equals eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("executorch")

from executorch.runtime import Runtime  # noqa: E402
from torch import nn  # noqa: E402

from tensorplan.integrations.executorch import lower  # noqa: E402


class Same(nn.Module):
    """Four copies of ``h`` that change nothing, a real pad, and a copy that is an output."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(x)
        p = F.pad(h, (0, 0, 0, 0))            # TF-style "same" padding of a 1x1 convolution
        e = p.expand(4, 8, 8)                 # to the shape it has
        q = e.permute(0, 1, 2)
        c = q.clone()
        real = F.pad(c, (1, 1))               # pads: stays
        return real * 2.0, h.clone()          # a copy that is a graph output: stays


def _ops(shipped) -> list[str]:
    graph = shipped.manager.exported_program().graph_module.graph
    return [n.target.__name__ for n in graph.nodes if n.op == "call_function"
            and n.target.__name__ not in ("alloc", "getitem")]


def test_copies_that_change_nothing_are_dropped_and_the_pte_equals_eager() -> None:
    x = torch.randn(4, 8, 8)
    shipped = lower(torch.export.export(Same(), (x,)), fold=False)
    assert shipped.identities == 4
    assert sorted(_ops(shipped)) == sorted(["relu.out", "constant_pad_nd.out", "mul.out",
                                            "_clone_dim_order.out"])
    program = Runtime.get().load_program(shipped.manager.buffer)
    outputs = [o.clone() for o in program.load_method("forward").execute([x])]
    for got, want in zip(outputs, Same()(x), strict=True):
        torch.testing.assert_close(got, want)


class Snapshot(nn.Module):
    """A clone of a buffer taken before the buffer is written: a snapshot, kept."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        before = self.state.clone()
        self.state.add_(x)
        return before * 2.0 + self.state


def test_a_copy_of_a_mutated_buffer_is_kept() -> None:
    x = torch.randn(8)
    shipped = lower(torch.export.export(Snapshot(), (x,)), fold=False)
    assert shipped.identities == 0
    program = Runtime.get().load_program(shipped.manager.buffer)
    method = program.load_method("forward")
    first, second = method.execute([x])[0].clone(), method.execute([x])[0].clone()
    model = Snapshot()
    torch.testing.assert_close((first, second), (model(x), model(x)))


class CacheRead(nn.Module):
    """A KV-cache write (``index_put`` into a buffer) whose new value is read through an
    expand to its own shape and a reshape, as the decomposed attention over a static cache
    reads it (optimum-executorch's Whisper decoder)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8, 16))

    def forward(self, value: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(1, position, value)
        return torch.relu(self.cache.expand(4, 8, 16).reshape(32, 16)) * 2.0


def test_a_copy_of_a_buffers_new_value_is_kept_and_the_pte_equals_eager() -> None:
    """ExecuTorch's re-inplace pass makes the ``index_put`` write into the buffer, and a
    reshape read straight from the ``index_put`` (its expand dropped) got storage of its own,
    never written: the ``.pte`` was 0.42 off eager on the Whisper decoder. The expand stays."""
    value, position = torch.randn(4, 1, 16), torch.tensor([3])
    model = CacheRead()
    shipped = lower(torch.export.export(CacheRead(), (value, position)), fold=False)
    assert "expand_copy.out" in _ops(shipped)
    program = Runtime.get().load_program(shipped.manager.buffer)  # owns the bytes
    method = program.load_method("forward")
    for step in range(3):
        position = torch.tensor([step * 2])
        value = torch.randn(4, 1, 16)
        torch.testing.assert_close(method.execute([value, position])[0].clone(),
                                   model(value, position))
