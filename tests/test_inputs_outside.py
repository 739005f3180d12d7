"""``compile(inputs_in_arena=False)``: the user inputs in a buffer of their own, after the arena.

On a microcontroller the image usually sits in the camera's frame buffer, not in the SRAM
arena (MCUNetV2 counts its figures so; ExecuTorch's ``alloc_graph_input=False``). The plan then
counts only what the arena holds; the inputs get their own buffer right after it, and the runs
still equal eager.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

import tensorplan as tp
from tensorplan.cli import main
from tensorplan.errors import InputError
from tensorplan.plan.validate import ViolationKind
from tensorplan.report import plan_to_c_header, plan_to_json


class SkipCnn(torch.nn.Module):
    """Two 3x3 convs and a skip from the image: the image is live at the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x).relu()) + x


IMAGE_BYTES = 3 * 16 * 16 * 4


@pytest.fixture(scope="module")
def image() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(1, 3, 16, 16)


@pytest.fixture(scope="module")
def model() -> SkipCnn:
    torch.manual_seed(0)
    return SkipCnn().eval()


@pytest.fixture(scope="module")
def inside(model, image) -> tp.Program:
    return tp.compile(model, (image,))


@pytest.fixture(scope="module")
def outside(model, image) -> tp.Program:
    return tp.compile(model, (image,), inputs_in_arena=False)


def test_the_arena_no_longer_counts_the_image(inside, outside):
    assert inside.plan.arena_bytes == 14_336 and inside.plan.input_bytes == 0
    assert outside.plan.arena_bytes == 11_264 == inside.plan.arena_bytes - IMAGE_BYTES
    assert outside.plan.input_bytes == IMAGE_BYTES
    assert outside.plan.buffer_bytes == 11_264 + IMAGE_BYTES
    assert outside.plan.lower_bound_bytes == 11_264
    image = next(s for s in outside.plan.storages.values() if s.kind == "input")
    assert image.offset == outside.plan.arena_bytes and image.size == IMAGE_BYTES
    assert "inputs outside the arena 3,072 B" in repr(outside.plan)


def test_runs_equal_eager_and_survive_save_and_load(model, image, outside, tmp_path):
    with torch.no_grad():
        expected = model(image)
    torch.testing.assert_close(outside.run(image), expected)
    outside.save(tmp_path / "skip.tp")
    loaded = tp.load(tmp_path / "skip.tp")
    assert loaded.plan.input_bytes == IMAGE_BYTES
    assert loaded.plan.arena_bytes == outside.plan.arena_bytes
    torch.testing.assert_close(loaded.run(image), expected)


def test_the_verifier_rejects_an_input_inside_the_arena_and_a_value_outside(outside):
    plan = outside.plan
    image = next(s for s in plan.storages.values() if s.kind == "input")
    other = next(s for s in plan.storages.values() if s.kind == "activation")
    moved_in = dataclasses.replace(plan, storages={
        **plan.storages, image.id: dataclasses.replace(image, offset=0)})
    moved_out = dataclasses.replace(plan, storages={
        **plan.storages, other.id: dataclasses.replace(other, offset=plan.arena_bytes)})
    for broken, sid in ((moved_in, image.id), (moved_out, other.id)):
        found = [v for v in broken.violations() if v.kind is ViolationKind.OUT_OF_ARENA]
        assert {v.buffers for v in found} == {(sid,)}, broken.violations()
        assert any(f"storage {sid} " in v.message and "is not in the" in v.message
                   for v in found), found


def test_banks_and_inputs_outside_say_to_pin_instead(model, image):
    with pytest.raises(InputError, match=r"pin each input to a bank of its own"):
        tp.compile(model, (image,), inputs_in_arena=False,
                   banks=[tp.Bank("sram", None, 1.0), tp.Bank("dram", None, 10.0)])


def test_the_header_and_json_carry_the_inputs_buffer(outside):
    header = plan_to_c_header(outside, "skip")
    assert "#define SKIP_ARENA_BYTES 11264u" in header
    assert "#define SKIP_INPUT_BYTES 3072u" in header
    assert re.search(r"#define SKIP_S\d+_X_OFFSET 11264u", header), header
    document = plan_to_json(outside, "skip")
    assert (document["arena_bytes"], document["input_bytes"]) == (11_264, IMAGE_BYTES)
    json.dumps(document)


def test_the_command_line_prints_both(capsys):
    assert main(["plan", "zoo:convnet", "--inputs-outside"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"│ inputs outside +│ +[\d,]+ B", out), out
    assert main(["plan", "zoo:convnet"]) == 0
    assert "inputs outside" not in capsys.readouterr().out


class TwoSlices(torch.nn.Module):
    """Two slices of the input, each made into a half of a ``cat``, with a temporary between
    them while the input is still read: the input is live across the ``cat``'s inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x[:, :1024])
        w = x[:, 1024:2048] * 2
        b = torch.relu(x[:, 2048:3072] * w.sum(1, keepdim=True))
        return torch.cat([a, b], dim=1) * 0.5


def test_concatenation_in_place_is_judged_without_the_inputs_it_leaves_out(tmp_path):
    """Making ``a`` and ``b`` in their halves of the ``cat`` keeps the ``cat`` output live
    while ``w`` is: with the 16 KiB input in the arena that raises the peak (x + out + w), so
    it is not done; with the input outside, the peak is the ``cat`` holding its inputs twice,
    and placing them takes it from 16 KiB to 12 KiB. A saved program makes the same choice
    when loaded."""
    x = torch.randn(1, 4096)
    inside = tp.compile(TwoSlices(), (x,), reorder=False)
    outside = tp.compile(TwoSlices(), (x,), reorder=False, inputs_in_arena=False)
    assert (inside.plan.arena_bytes, sorted(inside.alias.slices)) == (24_592, [])
    assert (outside.plan.arena_bytes, sorted(outside.alias.slices)) == (
        12_304, ["mul_1", "relu", "relu_1"])
    assert outside.plan.input_bytes == 16_384
    outside.save(tmp_path / "two_slices.tplan")
    loaded = tp.load(tmp_path / "two_slices.tplan")
    assert loaded.plan == outside.plan and sorted(loaded.alias.slices) == sorted(
        outside.alias.slices)
    for program in (inside, outside, loaded):
        torch.testing.assert_close(program.run(x), TwoSlices()(x))
