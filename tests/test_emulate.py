"""A ``.pte`` emulated from its bytes (``integrations.executorch.emulate``): every planned tensor
at its offset in one buffer per memory id, each kernel through its Python implementation. It
agrees with ExecuTorch's runtime on a program the runtime runs, and a plan whose live tensors
overlap gives other outputs.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("executorch")

from executorch.exir._serialize._program import (  # noqa: E402
    deserialize_pte_binary,
    serialize_pte_binary,
)

import tensorplan as tp  # noqa: E402
from tensorplan.integrations.executorch import emulate_pte, lower, run_pte  # noqa: E402


class _Stem(torch.nn.Module):
    """A conv, a skip add, a flatten (a memory view in the ``.pte``) and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mix = torch.nn.Conv2d(8, 8, 1)
        self.head = torch.nn.Linear(8 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x).relu()
        return self.head((self.mix(y) + y).flatten(1))


@pytest.fixture(scope="module")
def shipped() -> tuple[bytes, torch.Tensor, torch.Tensor]:
    """The ``.pte`` of ``_Stem``, an input and eager's output."""
    torch.manual_seed(0)
    model, x = _Stem().eval(), torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        return bytes(lower(torch.export.export(model, (x,))).manager.buffer), x, model(x)


def test_it_agrees_with_executorchs_runtime_and_with_eager(
        shipped: tuple[bytes, torch.Tensor, torch.Tensor]) -> None:
    pte, x, expected = shipped
    (emulated,) = emulate_pte(pte, [x])
    (ran,) = run_pte(pte, [x])
    torch.testing.assert_close(emulated, ran)
    torch.testing.assert_close(emulated, expected)


def test_a_plan_whose_live_tensors_overlap_gives_other_outputs(
        shipped: tuple[bytes, torch.Tensor, torch.Tensor]) -> None:
    pte, x, expected = shipped
    broken = deserialize_pte_binary(pte)
    planned = [v.val for v in broken.program.execution_plan[0].values
               if type(v.val).__name__ == "Tensor" and v.val.allocation_info is not None]
    assert len(planned) >= 4
    for tensor in planned:  # every planned tensor at offset 0: the conv's output overwrites x
        tensor.allocation_info.memory_offset_low = 0
    (emulated,) = emulate_pte(bytes(serialize_pte_binary(broken)), [x])
    assert not torch.allclose(emulated, expected)


def test_it_names_what_it_cannot_run(shipped: tuple[bytes, torch.Tensor, torch.Tensor]) -> None:
    pte, x, _ = shipped
    with pytest.raises(tp.InputError, match="takes 1 inputs, got 2"):
        emulate_pte(pte, [x, x])
    with pytest.raises(tp.ShipError, match="no method 'decode'; it has forward"):
        emulate_pte(pte, [x], method="decode")
