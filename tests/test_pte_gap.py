"""What keeps a ``.pte``'s arena above the Python plan (``integrations/executorch/gap.py``).

A small CNN pads the output of its stem before a strided convolution. Padded after (right and
bottom, as MobileNetV2's TF-style padding does), the ``.pte`` makes the pad's input in the tail
of its output and ships at the Python plan's arena: nothing to name. Padded before (left and
top), the kernel cannot take its input in its output's tail, the ``.pte``'s busiest step holds
the stem's output (8 x 24 x 24 floats) beside the pad's, and the gap names the pad's kernel
with those bytes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("executorch")

from executorch.runtime import Runtime  # noqa: E402

import tensorplan as tp  # noqa: E402
from tensorplan.integrations.executorch import lower  # noqa: E402
from tensorplan.integrations.executorch.gap import Gap, describe, pte_gap  # noqa: E402

STEM = 8 * 24 * 24 * 4  # bytes of the stem's output: the pad's input


class PaddedCNN(torch.nn.Module):
    """conv -> relu -> pad -> strided conv -> relu on a 24 x 24 image."""

    def __init__(self, pads: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.pads = pads
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.down = torch.nn.Conv2d(8, 16, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.down(F.pad(torch.relu(self.stem(x)), self.pads)))


def _both(pads: tuple[int, int, int, int]) -> tuple[torch.nn.Module, torch.Tensor, tp.Program,
                                                    object]:
    torch.manual_seed(0)
    model, x = PaddedCNN(pads).eval(), torch.randn(1, 3, 24, 24)
    with torch.no_grad():
        shipped = lower(torch.export.export(model, (x,)))
    return model, x, tp.compile(model, (x,)), shipped


def test_a_pad_before_names_its_kernel_and_the_bytes_at_the_peak() -> None:
    _, _, program, shipped = _both((1, 0, 1, 0))
    assert program.plan.arena_bytes == 29216
    assert shipped.arena_bytes == 38432  # the pad's output (8 x 25 x 25) beside the stem's
    gaps = pte_gap(program, shipped)
    assert gaps == (Gap("aten::constant_pad_nd.out", "aten_constant_pad_nd_default",
                        "input cannot lie in the tail of its output", STEM),)
    assert describe(gaps) == ("aten::constant_pad_nd.out input cannot lie in the tail of its "
                              "output: 18,432 B at the peak")


def test_a_pad_after_ships_at_the_python_plan_and_names_nothing() -> None:
    model, x, program, shipped = _both((0, 1, 0, 1))
    assert shipped.arena_bytes == program.plan.arena_bytes == 29216
    assert pte_gap(program, shipped) == () and describe(()) == ""
    loaded = Runtime.get().load_program(shipped.manager.buffer)
    output = loaded.load_method("forward").execute([x])[0].clone()
    with torch.no_grad():
        torch.testing.assert_close(output, model(x))


def test_describe_sums_the_gaps_of_one_kernel() -> None:
    gaps = [Gap("aten::constant_pad_nd.out", "pad", "input cannot lie in the tail of its output",
                100),
            Gap("aten::permute_copy.out", "permute", "copies where the Python plan has a view",
                300),
            Gap("aten::constant_pad_nd.out", "pad_1",
                "input cannot lie in the tail of its output", 50)]
    assert describe(gaps) == (
        "aten::permute_copy.out copies where the Python plan has a view: 300 B at the peak; "
        "aten::constant_pad_nd.out input cannot lie in the tail of its output: 150 B at the "
        "peak (2 ops)")


def test_a_patched_programs_gap_is_found_through_its_own_node_names() -> None:
    """Every patch's nodes come from the same exported nodes, so they are matched by their own
    names (the nearest of the ``.pte`` node's lineage): a row of 4x4 patches is a ``cat`` in
    the ``.pte`` that copies them (a column of a channels-first map is no contiguous slice),
    where the Python plan makes each patch in its slice of the row."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1)).eval()
    x = torch.randn(1, 3, 96, 96)
    program = tp.compile(model, (x,), patches=(4, 4))
    with torch.no_grad():
        shipped = lower(program)
    assert shipped.arena_bytes > program.plan.arena_bytes
    assert pte_gap(program, shipped) == (
        Gap("aten::cat.out", "aten_cat_default_4", "input not made in its slice", 36_864),)


class CachedGqa(torch.nn.Module):
    """A KV cache of 2 heads written at ``pos``, read by 4 query heads (grouped-query
    attention: each key head unsqueezed, expanded and reshaped to two), the keys also summed
    (read twice, the repeat is made: ``rewrite/grouped.py`` leaves it)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, 32, 16))

    def forward(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(2, pos, k)
        keys = self.cache.unsqueeze(2).expand(1, 2, 2, 32, 16).reshape(1, 4, 32, 16)
        return torch.softmax(q @ keys.transpose(-1, -2), dim=-1), keys.sum()


def test_a_copy_held_beside_its_source_is_named_by_the_op_that_makes_it() -> None:
    """The ``.pte`` expands the cache into a copy (``unsqueeze_copy`` then ``expand_copy``),
    held at its busiest step beside the cache, where the Python plan has views of it: no op
    reads the cache and writes the copy at that step, so the pair rule finds nothing; the
    copy's storage, whose every value the Python plan keeps in the cache's storage, is named
    by ``expand_copy`` with its own bytes."""
    args = (torch.randn(1, 4, 4, 16), torch.randn(1, 2, 4, 16), torch.arange(4))
    program = tp.compile(CachedGqa(), args)
    shipped = lower(program)
    assert (program.plan.arena_bytes, shipped.arena_bytes) == (15_376, 21_520)
    assert pte_gap(program, shipped) == (
        Gap("aten::expand_copy.out", "aten_expand_copy_default",
            "copies where the Python plan has a view", 1 * 4 * 32 * 16 * 4),)
