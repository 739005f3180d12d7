"""Expands read only by broadcasting kernels are dropped before ExecuTorch's lowering
(``broadcasts.py``), over the measured table ``kernels.broadcasting()``, measured again here:
every entry's kernel is given the unexpanded operand in each of its listed arguments, run in
ExecuTorch's runtime and compared with eager PyTorch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

pytest.importorskip("executorch")

from executorch.runtime import Runtime  # noqa: E402
from torch import nn  # noqa: E402

from tensorplan.integrations.executorch import kernels, lower  # noqa: E402

B, H, S, T = 2, 3, 5, 7  # odd sizes
FULL = (B, H, S, T)
# pattern -> (shape of the operand expanded to FULL, shape of the other operands)
PATTERNS = {"leading dims": ((S, T), FULL), "size-1 middle dims": ((B, 1, 1, T), FULL),
            "size-1 last dim": ((B, H, S, 1), FULL),
            "beside a broadcast operand": ((1, H, 1, T), (B, 1, S, 1))}

Maker = Callable[[tuple[int, ...]], torch.Tensor]


def _floats(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape)


def _positive(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape) + 0.5


def _nonzero(shape: tuple[int, ...]) -> torch.Tensor:
    return _positive(shape) * torch.where(torch.rand(shape) > 0.5, 1.0, -1.0)


def _bools(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.rand(shape) > 0.5


def _ints(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randint(-20, 20, shape, dtype=torch.int32)


def _binary(fn: Callable, first: Maker = _floats, second: Maker = _floats,
            names: tuple[str, str] = ("self", "other")) -> tuple[Callable, dict[str, Maker]]:
    return fn, {names[0]: first, names[1]: second}


# table entry -> (the op, how each listed argument is made, by schema name in schema order)
OPS: dict[str, tuple[Callable, dict[str, Maker]]] = {
    "aten::add.out": _binary(torch.add), "aten::sub.out": _binary(torch.sub),
    "aten::mul.out": _binary(torch.mul), "aten::div.out": _binary(torch.div, second=_nonzero),
    "aten::div.out_mode": _binary(lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                                  second=_nonzero),
    "aten::maximum.out": _binary(torch.maximum), "aten::minimum.out": _binary(torch.minimum),
    "aten::atan2.out": _binary(torch.atan2),
    "aten::fmod.Tensor_out": _binary(torch.fmod, second=_nonzero),
    "aten::remainder.Tensor_out": _binary(torch.remainder, second=_nonzero),
    "aten::pow.Tensor_Tensor_out": _binary(torch.pow, _positive, names=("self", "exponent")),
    "aten::eq.Tensor_out": _binary(torch.eq, _ints, _ints),
    "aten::ne.Tensor_out": _binary(torch.ne, _ints, _ints),
    "aten::lt.Tensor_out": _binary(torch.lt), "aten::le.Tensor_out": _binary(torch.le),
    "aten::gt.Tensor_out": _binary(torch.gt), "aten::ge.Tensor_out": _binary(torch.ge),
    "aten::bitwise_and.Tensor_out": _binary(torch.bitwise_and, _ints, _ints),
    "aten::bitwise_or.Tensor_out": _binary(torch.bitwise_or, _ints, _ints),
    "aten::bitwise_xor.Tensor_out": _binary(torch.bitwise_xor, _ints, _ints),
    "aten::logical_and.out": _binary(torch.logical_and, _bools, _bools),
    "aten::logical_or.out": _binary(torch.logical_or, _bools, _bools),
    "aten::logical_xor.out": _binary(torch.logical_xor, _bools, _bools),
    "aten::where.self_out": (torch.where, {"condition": _bools, "self": _floats,
                                           "other": _floats}),
}
TABLE = kernels.broadcasting()


class Cases(nn.Module):
    """One call of ``op`` per (argument, pattern): that argument expanded to ``FULL``."""

    def __init__(self, op: Callable, names: list[str], cases: list[tuple[str, str]]) -> None:
        super().__init__()
        self.op, self.names, self.cases = op, names, cases

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat, results = iter(inputs), []
        for argument, _ in self.cases:
            operands = [next(flat) for _ in self.names]
            results.append(self.op(*[value.expand(FULL) if name == argument else value
                                     for name, value in zip(self.names, operands,
                                                            strict=True)]))
        return tuple(results)


def _inputs(makers: dict[str, Maker], cases: list[tuple[str, str]]) -> list[torch.Tensor]:
    inputs = []
    for argument, pattern in cases:
        expanded, other = PATTERNS[pattern]
        inputs += [make(expanded if name == argument else other)
                   for name, make in makers.items()]
    return inputs


def _ops(shipped) -> list[str]:
    graph = shipped.manager.exported_program().graph_module.graph
    return [n.target.__name__ for n in graph.nodes if n.op == "call_function"]


def _execute(shipped, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    program = Runtime.get().load_program(shipped.manager.buffer)  # owns the method's bytes
    method = program.load_method("forward")
    return [o.clone() for o in method.execute(inputs)]


def test_installed_runtime_is_measured() -> None:
    assert kernels.installed_version() in kernels.BROADCASTING
    assert set(TABLE) == set(OPS)
    assert {key: set(makers) for key, (_, makers) in OPS.items()} == {
        key: set(names) for key, names in TABLE.items()}
    assert kernels.broadcasting("0.0.0") == {}


@pytest.mark.parametrize("key", sorted(OPS))
def test_kernel_broadcasts_the_unexpanded_operand(key: str) -> None:
    op, makers = OPS[key]
    cases = [(argument, pattern) for argument in makers for pattern in PATTERNS]
    model, inputs = Cases(op, list(makers), cases), _inputs(makers, cases)
    shipped = lower(torch.export.export(model, tuple(inputs)), reorder=False, fold=False)
    assert shipped.broadcasts == len(cases)
    assert "expand_copy.out" not in _ops(shipped)
    for got, want in zip(_execute(shipped, inputs), model(*inputs), strict=True):
        torch.testing.assert_close(got, want)


class MaskedAttention(nn.Module):
    """Two attention layers; the padding mask is expanded once to heads x S x S and added to
    the scores of each."""

    def __init__(self, heads: int = 4, width: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.ModuleList(nn.Linear(width, 3 * width) for _ in range(2))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        bias = ((1.0 - mask[:, None, None, :].float()) * -1e4).expand(
            batch, self.heads, seq, seq)
        for qkv in self.qkv:
            q, k, v = qkv(x).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (width // self.heads) ** 0.5 + bias
            x = x + (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, width)
        return x


def test_an_expanded_attention_mask_is_read_unexpanded_and_the_pte_equals_eager() -> None:
    torch.manual_seed(0)
    model, x = MaskedAttention().eval(), torch.randn(1, 32, 64)
    mask = torch.ones(1, 32, dtype=torch.long)
    mask[0, 27:] = 0
    exported = torch.export.export(model, (x, mask))
    shipped = lower(exported, fold=False)
    kept = lower(exported, fold=False, broadcasting={})
    assert (shipped.broadcasts, kept.broadcasts) == (1, 0)
    assert "expand_copy.out" not in _ops(shipped) and "expand_copy.out" in _ops(kept)
    assert (shipped.arena_bytes, kept.arena_bytes) == (57_472, 73_728)  # the expand: 16 KB
    with torch.no_grad():
        torch.testing.assert_close(_execute(shipped, [x, mask])[0], model(x, mask))


class Stays(nn.Module):
    """Expands that must stay (read by softmax too; a graph output; a repeat that tiles; a
    zero-dim input; an operand twice in one add; a new leading dim no other operand has; a
    snapshot of a buffer written after it), and a repeat of size-1 dims that is an expand,
    dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(S, T))

    def forward(self, x: torch.Tensor, small: torch.Tensor, output: torch.Tensor,
                tile: torch.Tensor, scalar: torch.Tensor, twice: torch.Tensor,
                row: torch.Tensor) -> tuple[torch.Tensor, ...]:
        read = small.expand(FULL)
        returned = output.expand(FULL)
        snapshot = self.state.expand(FULL)
        self.state.add_(x[0, 0])
        doubled = twice.expand(FULL)
        return (x + read, read.softmax(-1), x * returned, returned,
                tile.repeat(1, 1, 1, 2) - x.repeat(1, 1, 1, 2), x + scalar.expand(FULL),
                doubled + doubled, row.expand(1, T) + x[0, 0, 0], x - snapshot,
                x * small.repeat(B, H, 1, 1))


def test_expands_that_must_stay_are_kept_and_the_pte_equals_eager() -> None:
    inputs = [torch.randn(FULL), torch.randn(1, 1, S, T), torch.randn(B, 1, S, 1),
              torch.randn(FULL), torch.tensor(0.5), torch.randn(1, H, 1, 1), torch.randn(T)]
    shipped = lower(torch.export.export(Stays(), tuple(inputs)), fold=False)
    assert shipped.broadcasts == 1  # the repeat of size-1 dims
    ops = _ops(shipped)
    assert (ops.count("expand_copy.out"), ops.count("repeat.out")) == (6, 2)
    model = Stays()
    program = Runtime.get().load_program(shipped.manager.buffer)  # owns the method's bytes
    method = program.load_method("forward")
    for _ in range(2):  # the buffer written by the first run is read by the second
        got = [o.clone() for o in method.execute(inputs)]
        for actual, expected in zip(got, model(*inputs), strict=True):
            torch.testing.assert_close(actual, expected)
