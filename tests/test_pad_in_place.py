"""Pads in place (issue 18, item 3): a ``constant_pad_nd`` whose input dies there gets that
input made in the interior of the padded output; the pad only writes the border."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tensorplan as tp
from tensorplan.analysis.alias import Slice


class ConvPadConv(torch.nn.Module):
    """A convolution, a pad of its result, a strided grouped convolution of the pad."""

    def __init__(self, pad: tuple[int, ...], value: float) -> None:
        super().__init__()
        self.pad, self.value = pad, value
        self.first = torch.nn.Conv2d(3, 8, 3)
        self.second = torch.nn.Conv2d(8, 8, 3, stride=2, groups=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(F.pad(self.first(x).relu(), self.pad, value=self.value))


def _model(pad: tuple[int, ...], value: float, channels_last: bool):
    model, x = ConvPadConv(pad, value).eval(), torch.randn(2, 3, 17, 19)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    return model, x


def _kinds(program: tp.Program) -> dict[str, str]:
    return {row.name: row.kind.value for row in program.lowering()}


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("pad", [(1, 1, 1, 1), (1, 2, 0, 1), (0, 3), (2, 0, 0, 0)])
def test_pad_input_made_in_the_interior_equals_eager(pad, channels_last) -> None:
    model, x = _model(pad, 0.5, channels_last)
    program = tp.compile(model, (x,))
    assert _kinds(program)["constant_pad_nd"] == "border"
    out = program.specs["constant_pad_nd"]
    before = [0, 0] + [pad[2] if len(pad) > 2 else 0, pad[0]]
    offset = sum(b * s for b, s in zip(before, out.strides, strict=True)) * 4
    assert program.schedule.alias.slices["relu"] == Slice(offset, out.strides)
    assert program.specs["relu"].storage == out.storage
    for _ in range(2):  # the border is written again on every run
        torch.testing.assert_close(program.run(x), model(x))


def test_the_pad_costs_no_second_buffer() -> None:
    model, x = _model((1, 1, 1, 1), 0.0, False)
    placed = tp.compile(model, (x,)).plan.arena_bytes
    apart = tp.compile(model, (x,), reuse=False).plan.arena_bytes
    x_bytes, relu, padded = 7_760, 2 * 8 * 15 * 17 * 4, 2 * 8 * 17 * 19 * 4  # x 16-aligned
    assert apart == relu + padded  # at the pad: its input and its output
    assert placed == x_bytes + padded  # at the first convolution: x and the pad's storage


class Crop(torch.nn.Module):
    """A negative pad (a crop): nothing to place."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x.sin(), (-1, 2)) * 2


class PadThenReuse(torch.nn.Module):
    """The pad's input is read again after the pad: it cannot live in the pad's interior."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x.sin()
        return F.pad(h, (1, 1)), h * 2


@pytest.mark.parametrize("model", [Crop(), PadThenReuse()])
def test_pads_that_cannot_be_placed_run_as_before(model) -> None:
    x = torch.randn(4, 9)
    program = tp.compile(model, (x,))
    assert _kinds(program)["constant_pad_nd"] != "border"
    assert not program.schedule.alias.slices
    torch.testing.assert_close(program.run(x), model(x))


@pytest.mark.slow
def test_mobilenet_v2_pads_are_planned_in_place() -> None:
    from tensorplan import zoo

    example = zoo.example("hf_mobilenet_v2")
    program = tp.compile(example.model, example.args)
    kinds = [row.kind.value for row in program.lowering() if row.target.endswith("pad_nd.default")]
    assert (len(kinds), kinds.count("border")) == (52, 41)
    assert program.plan.arena_bytes == 571_584  # 903,360 B with every pad in its own buffer
    with torch.no_grad():
        torch.testing.assert_close(program.run(*example.args), example.model(*example.args))
