"""Memory plans and runs of the ``torchvision`` and ``timm`` models of
``tensorplan.zoo.vision`` (random weights), against eager and ExecuTorch.

Each model is compiled once per test process (1–4 s each here) and lowered by ExecuTorch once.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from zoo_programs import check_plan_is_tight, compiled, listed_in_a_fresh_process

from tensorplan import zoo
from tensorplan.runtime.lower import Kind

# A plain ``import torchvision`` fails beside the CPU torch (zoo/vision.py's import_torchvision),
# so the packages are looked up, not imported.
for _package in ("torchvision", "timm"):
    if importlib.util.find_spec(_package) is None:
        pytest.skip(f"{_package} is not installed: pip install 'tensorplan[vision]'",
                    allow_module_level=True)
pytestmark = pytest.mark.slow

VIDEO = ["tv_r2plus1d_18", "tv_r2plus1d_18_channels_last", "tv_r3d_18",
         "tv_r3d_18_channels_last"]
TIMM = ["timm_cs3darknet_s", "timm_dla46_c", "timm_dpn48b", "timm_hrnet_w18_small",
        "timm_mixnet_s", "timm_selecsls42"]
CHANNELS_LAST = [name for name in VIDEO if name.endswith("_channels_last")]
CHANNELS_LAST_3D = (0, 2, 3, 4, 1)  # dim order of a channels_last_3d (N, C, T, H, W) tensor

# Functional fallbacks per run: ops with no native out-variant on CPU.
EXPECTED_FALLBACKS = {
    "tv_r2plus1d_18": {"aten.convolution.default": 37},
    "tv_r2plus1d_18_channels_last": {"aten.convolution.default": 37},
    "tv_r3d_18": {"aten.convolution.default": 20},
    "tv_r3d_18_channels_last": {"aten.convolution.default": 20},
    "timm_cs3darknet_s": {"aten.convolution.default": 32},
    "timm_dla46_c": {"aten.convolution.default": 49},
    "timm_dpn48b": {"aten.convolution.default": 70},
    "timm_hrnet_w18_small": {"aten.convolution.default": 91,
                             "aten.upsample_nearest2d.vec": 10},
    "timm_mixnet_s": {"aten.convolution.default": 123},
    "timm_selecsls42": {"aten.convolution.default": 41},
}

# (cat nodes, of which made in slices of their output) in each timm graph. CSP's and DPN's
# cats read a view of a wider tensor (a channel half of a split, a slice of the dual path),
# which concat.py does not place (every value written into an input's storage must have the
# input's shape); HRNet fuses its branches by addition.
CATS = {"timm_cs3darknet_s": (4, 0), "timm_dla46_c": (6, 6), "timm_dpn48b": (16, 0),
        "timm_hrnet_w18_small": (0, 0), "timm_mixnet_s": (34, 34), "timm_selecsls42": (6, 6)}


def test_zoo_lists_vision_models_without_importing_torchvision() -> None:
    listed = listed_in_a_fresh_process(("tv_", "timm_"), ("torchvision", "timm"))
    assert listed == (sorted(TIMM + VIDEO), {"torchvision": False, "timm": False})


@pytest.mark.parametrize("name", VIDEO + TIMM)
def test_plan_is_at_its_lower_bound(name: str) -> None:
    check_plan_is_tight(compiled(name))


@pytest.mark.parametrize("name", VIDEO + TIMM)
def test_run_matches_eager(name: str) -> None:
    example, program = zoo.example(name), compiled(name)
    with torch.no_grad():
        expected = example.model(*example.args)
    assert expected.shape == (1, 10)
    torch.testing.assert_close(program.run(*example.args), expected)
    assert program.stats == EXPECTED_FALLBACKS[name]


@pytest.mark.parametrize("name", TIMM)
def test_concatenations_in_place(name: str) -> None:
    rows = [row for row in compiled(name).lowering() if row.target == "aten.cat.default"]
    assert (len(rows), sum(row.kind is Kind.CONCATENATED for row in rows)) == CATS[name]


@pytest.mark.parametrize("name", CHANNELS_LAST)
def test_channels_last_3d_clip_planned_as_traced_in_the_same_bytes(name: str) -> None:
    """The clip is planned channels_last_3d; every convolution's output contiguous, as torch
    2.13's CPU ``conv3d`` returns it even from channels_last_3d input and weights."""
    program = compiled(name)
    nodes = program.exported_program.graph.nodes
    convolutions = [n.name for n in nodes if n.target is torch.ops.aten.convolution.default]
    clip = program.exported_program.graph_signature.user_inputs[0]
    assert program.specs[clip].dim_order == CHANNELS_LAST_3D
    assert {program.specs[v].dim_order for v in convolutions} == {(0, 1, 2, 3, 4)}
    contiguous = compiled(name.removesuffix("_channels_last")).plan
    assert program.plan.arena_bytes == contiguous.arena_bytes
    assert program.plan.lower_bound_bytes == contiguous.lower_bound_bytes


@pytest.mark.parametrize("name", VIDEO + TIMM)
def test_arena_at_most_executorch(name: str) -> None:
    """ExecuTorch (constant propagation on) lowers and plans every one of these models; its
    portable runtime runs the timm ones, not the video nets (its convolution takes 3-D or 4-D
    input only, and it refuses a channels_last_3d input). A channels_last entry is compared
    with the contiguous lowering: ExecuTorch plans the same arena bytes for both (measured:
    786432 for r3d_18, 1703936 for r2plus1d_18), and this lowers each net once."""
    pytest.importorskip("executorch")
    from executorch_reference import executorch_arena

    reference = executorch_arena(name.removesuffix("_channels_last"))
    assert compiled(name).plan.arena_bytes <= reference
