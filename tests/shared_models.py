"""Small modules and a custom op that several stage tests use."""

from __future__ import annotations

import torch
from torch._higher_order_ops.map import map as map_op
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop


class Fn(torch.nn.Module):
    """A module whose forward applies ``fn`` to its one input ``x``."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Chain(torch.nn.Module):
    def forward(self, x):
        return x.relu().neg()


class ConvClone(torch.nn.Module):
    def __init__(self, channels_in: int = 3) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels_in, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x).clone()


class CondModel(torch.nn.Module):
    """A cond whose branches return a (4, 3) tensor and a tensor of 2 or 3 rows."""

    def forward(self, x, p):
        def true_fn(x):
            return x.sin() * 2, x[:2].cos()

        def false_fn(x):
            return x.cos() + 1, x[1:4].exp()

        return torch.cond(p.sum() > 0, true_fn, false_fn, (x,))


class Branches(torch.nn.Module):
    """A cond with a branch of several temporaries and a one-op branch."""

    def forward(self, x, p):
        def big(t):
            return (t.exp() * 2).sin() + 1

        def small(t):
            return t.neg()
        return torch.cond(p.sum() > 0, big, small, (x,)) * 2


class Loop(torch.nn.Module):
    def forward(self, i, x):
        return while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2 + 1), (i, x))


class Mapped(torch.nn.Module):
    def forward(self, xs, y):
        return map_op(lambda x, y: (x @ y).relu(), xs, y)


class Scanned(torch.nn.Module):
    def forward(self, init, xs):
        def combine(carry, x):
            nxt = carry + x
            return nxt, nxt * 2
        return scan(combine, init, xs)


@torch.library.custom_op("tensorplan_test::positives", mutates_args=())
def positives(x: torch.Tensor) -> torch.Tensor:
    """The positive elements of ``x``: a size known only from the data."""
    return x[x > 0].clone()


@positives.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())
