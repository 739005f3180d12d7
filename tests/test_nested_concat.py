"""A concatenation of concatenations made in place: each tile straight in the grid's output.

A patched prefix ends in a grid of tiles, concatenated along W into rows and the rows along H
(``rewrite/patches.py``). Each row is made in its slice of the output, and each tile, made in
its slice of the row, moves with it (``schedule/concat._moved``): the tiles are written where
the output keeps them, and no row or output copy exists beside them.
"""

from __future__ import annotations

import pytest
import torch

import tensorplan as tp


class Grid(torch.nn.Module):
    """Four 1x1 convs of one image, concatenated as a 2x2 grid: rows along W, then along H."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(4, 8, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c, d = (conv(x) for conv in self.convs)
        top, bottom = torch.cat([a, b], dim=3), torch.cat([c, d], dim=3)
        return torch.cat([top, bottom], dim=2).relu()


@pytest.mark.parametrize(("memory_format", "strides"), [
    (torch.contiguous_format, (2048, 256, 16, 1)),
    (torch.channels_last, (2048, 1, 128, 8)),
])
def test_the_tiles_of_a_grid_are_made_in_the_grids_output(memory_format, strides):
    torch.manual_seed(0)
    model = Grid().eval()
    x = torch.randn(1, 4, 8, 8).to(memory_format=memory_format)
    prog = tp.compile(model, (x,))
    slices = prog.schedule.alias.slices
    tiles = ["convolution", "convolution_1", "convolution_2", "convolution_3"]
    assert all(t in slices for t in tiles), sorted(slices)
    # the tiles' first elements at (0, 0), (0, 8), (8, 0), (8, 8) of the 16x16 output
    expected = [0, 8 * strides[3], 8 * strides[2], 8 * strides[2] + 8 * strides[3]]
    assert [slices[t].offset // 4 for t in tiles] == expected
    assert all(slices[t].strides == strides for t in tiles)
    # the output (8 x 16 x 16 floats) and the image: no row beside them
    assert prog.plan.arena_bytes == 8 * 16 * 16 * 4 + 4 * 8 * 8 * 4
    with torch.no_grad():
        torch.testing.assert_close(prog.run(x), model(x))
