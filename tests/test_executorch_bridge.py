"""The ExecuTorch bridge: ExecuTorch's own MemoryPlanningPass planning with tensorplan.

Each model is lowered twice, with ExecuTorch's default greedy and with the bridge; the bridge's
program must run on ExecuTorch's runtime like eager PyTorch, pass ExecuTorch's plan verifier,
and need no larger an arena (the exact sizes are pinned below).
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("executorch")

from executorch.exir import ExecutorchBackendConfig, to_edge  # noqa: E402
from executorch.exir.memory_planning import Verifier  # noqa: E402
from executorch.exir.passes import MemoryPlanningPass  # noqa: E402
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass  # noqa: E402
from executorch.exir.tensor import TensorSpec  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

from tensorplan import zoo  # noqa: E402
from tensorplan.errors import TensorPlanError  # noqa: E402
from tensorplan.integrations.executorch import (  # noqa: E402
    tensorplan_algo,
    tensorplan_memory_planning,
)
from tensorplan.integrations.executorch.bodies import OFFSET_KEY, placed_regions  # noqa: E402

# model -> (ExecuTorch greedy arena, tensorplan bridge arena), bytes, measured with 1.5.1
ARENAS = {
    "mlp": (75_776, 75_776),
    "convnet": (393_216, 393_216),
    "tiny_gpt": (139_264, 114_688),
}
MODELS = [
    "mlp",
    "convnet",
    pytest.param("tiny_gpt", marks=pytest.mark.slow),  # two lowerings take ~9 s
]


class CondModel(torch.nn.Module):
    """A ``torch.cond`` between two elementwise branches, so ExecuTorch plans two subgraphs."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x * 2 + y
        z = torch.cond(h.sum() > 0, _true_branch, _false_branch, (h, y))
        return z + 1


def _true_branch(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (h.sin() * y).cos() + 1


def _false_branch(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (h - y).relu() * h


def _example(name: str) -> zoo.Example:
    """The zoo model with static shapes; convnet in NCHW (ExecuTorch's portable batch norm
    rejects channels_last input)."""
    example = zoo.example(name)
    if name == "convnet":
        model = example.model.to(memory_format=torch.contiguous_format)
        example = dataclasses.replace(example, model=model,
                                      args=tuple(a.contiguous() for a in example.args))
    return example


def _lower(model: torch.nn.Module, args: tuple[Any, ...], bridge: bool,
           passes: tuple[Any, ...] = ()) -> Any:
    """An ExecutorchProgramManager planned by ExecuTorch's greedy, or by the bridge."""
    with torch.no_grad():
        exported = torch.export.export(model, args, dynamic_shapes=None)
    config = ExecutorchBackendConfig(passes=list(passes))
    if bridge:
        planning = MemoryPlanningPass(memory_planning_algo=tensorplan_memory_planning("auto"))
        config = ExecutorchBackendConfig(passes=list(passes), memory_planning_pass=planning)
    return to_edge(exported).to_executorch(config)


@functools.cache
def _lowered(name: str, bridge: bool) -> Any:
    """Lower each zoo model once per planner for the whole module."""
    example = _example(name)
    return _lower(example.model, example.args, bridge)


def _arena(program: Any) -> int:
    """Bytes of the planned (non-constant) buffers of the forward method."""
    return sum(program.executorch_program.execution_plan[0].non_const_buffer_sizes[1:])


def _execute(program: Any, args: tuple[Any, ...]) -> list[Any]:
    """Run ``forward`` on ExecuTorch's runtime; outputs are copied while the program is loaded."""
    loaded = Runtime.get().load_program(program.buffer)
    outputs = loaded.load_method("forward").execute(list(args))
    return [out.clone() if isinstance(out, torch.Tensor) else out for out in outputs]


def _verify(program: Any) -> int:
    """Run ExecuTorch's plan verifier on the top-level graph; return its count of reused pairs."""
    exported = program.exported_program()
    verifier = Verifier(exported.graph_module, True, True, True, exported.graph_signature)
    verifier.verify_graph_input_output()
    return verifier.verify_storage_reuse()


@pytest.mark.parametrize("name", MODELS)
def test_bridge_program_runs_like_eager(name: str) -> None:
    example = _example(name)
    outputs = _execute(_lowered(name, True), example.args)
    with torch.no_grad():
        expected = example.model(*example.args)
    torch.testing.assert_close(outputs[0], expected)


@pytest.mark.parametrize("name", MODELS)
def test_bridge_arena_is_no_larger_than_greedy(name: str) -> None:
    greedy, bridge = _arena(_lowered(name, False)), _arena(_lowered(name, True))
    assert bridge <= greedy
    assert (greedy, bridge) == ARENAS[name]


@pytest.mark.parametrize("name", MODELS)
def test_executorch_verifier_accepts_bridge_plan(name: str) -> None:
    assert _verify(_lowered(name, True)) > 0


def _planned_specs(graph_module: torch.fx.GraphModule) -> list[TensorSpec]:
    """The non-constant tensor specs of the graph's nodes that have an offset."""
    specs = [node.meta.get("spec") for node in graph_module.graph.nodes]
    return [spec for spec in specs if isinstance(spec, TensorSpec) and not spec.const
            and spec.mem_offset is not None]


def test_bridge_puts_every_planned_tensor_in_greedys_arena() -> None:
    specs = _planned_specs(_lowered("mlp", True).exported_program().graph_module)
    assert specs and {spec.mem_id for spec in specs} == {1}
    assert all(spec.mem_offset % 16 == 0 for spec in specs)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["true_branch", "false_branch"])
def test_cond_subgraphs_are_planned_and_run(sign: float) -> None:
    model = CondModel()
    x, y = sign * torch.rand(8, 16) * 5, torch.rand(8, 16)
    greedy, bridge = _lower(model, (x, y), False), _lower(model, (x, y), True)
    torch.testing.assert_close(_execute(bridge, (x, y))[0], model(x, y))
    _verify(bridge)  # raises when two live tensors share bytes
    top = bridge.exported_program().graph_module
    branches = [m for m in top.children() if isinstance(m, torch.fx.GraphModule)]
    assert len(branches) == 2
    for branch in branches:
        Verifier(branch, False, True, True).verify_storage_reuse()
    # the branches' arenas: one region of the top level's (one branch runs), at the cond only
    regions = placed_regions(top, 1)
    assert len(regions) == 1 and all(b.meta[OFFSET_KEY] == regions[0][3] for b in branches)
    for _, size, step, offset in regions:
        for spec in _planned_specs(top):
            if spec.lifetime[0] <= step <= spec.lifetime[1]:
                assert spec.mem_offset + spec.allocated_memory <= offset or \
                    offset + size <= spec.mem_offset
    assert _arena(bridge) <= _arena(greedy)


def test_mutable_buffer_keeps_its_state_across_runs() -> None:
    example, eager = zoo.example("kv_cache"), zoo.example("kv_cache").model
    keep_initial_cache = InitializedMutableBufferPass(["k_cache", "v_cache"])
    program = _lower(example.model, example.args, True, passes=(keep_initial_cache,))
    loaded = Runtime.get().load_program(program.buffer)
    method = loaded.load_method("forward")
    for step in range(3):
        args = (torch.randn(1, 32), torch.tensor([step]))
        with torch.no_grad():
            torch.testing.assert_close(method.execute(list(args))[0], eager(*args))


def _spec(numel: int, first: int, last: int) -> TensorSpec:
    """A float32 spec of ``numel`` elements live at node indices ``first..last``."""
    spec = TensorSpec.from_tensor(torch.empty(numel))
    spec.lifetime = [first, last]
    return spec


def test_algo_reserves_submodule_prefix_and_adds_padding() -> None:
    a, b, c = _spec(4, 0, 1), _spec(8, 1, 2), _spec(4, 2, 3)  # 16, 32, 16 bytes
    graph = SimpleNamespace(input_mem_buffer_sizes=[0, 40])
    result = tensorplan_algo(16, [a, b, c], graph, None, 64)
    offsets = {id(s): r.mem_offset for s, r in result.spec_dict.items()}
    assert min(offsets.values()) == 48  # the 40 reserved bytes, rounded up to the alignment
    assert result.bufsizes == [0, 48 + 48 + 64]
    assert offsets[id(a)] == offsets[id(c)] != offsets[id(b)]  # a and c share bytes, b does not
    ids = {id(s): r.mem_obj_id for s, r in result.spec_dict.items()}
    assert ids[id(a)] == ids[id(c)]


def test_algo_places_storage_backed_spec_inside_its_base() -> None:
    base, result_spec, other = _spec(8, 0, 2), _spec(4, 1, 2), _spec(8, 0, 2)
    result_spec.storage_base, result_spec.storage_base_offset = base, 16
    result = tensorplan_algo(16, [base, result_spec, other], SimpleNamespace(), None)
    placed = result.spec_dict
    assert placed[result_spec].mem_offset == placed[base].mem_offset + 16
    assert placed[result_spec].mem_obj_id == placed[base].mem_obj_id
    assert placed[other].mem_obj_id != placed[base].mem_obj_id
    assert result.bufsizes == [0, 64]


def test_specs_with_their_own_mem_id_get_their_own_arena() -> None:
    a, b = _spec(4, 0, 1), _spec(4, 0, 1)
    b.mem_id = 2
    result = tensorplan_algo(16, [a, b], SimpleNamespace(), None)
    assert (result.spec_dict[a].mem_id, result.spec_dict[b].mem_id) == (1, 2)
    assert result.bufsizes == [0, 16, 16]


def test_factory_without_executorch_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "executorch.exir", None)
    with pytest.raises(TensorPlanError, match=r"pip install tensorplan\[executorch\]"):
        tensorplan_memory_planning()


def test_importing_tensorplan_does_not_import_executorch() -> None:
    code = ("import sys, tensorplan, tensorplan.integrations.executorch; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'executorch']")
    subprocess.run([sys.executable, "-c", code], check=True)


class PartlyDelegated(torch.nn.Module):
    """Linear and conv layers XNNPACK takes, with cumsum/sin/flip between them that it leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(32, 64), torch.nn.Linear(64, 64),
                                  torch.nn.Linear(64, 16))
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.cumsum(torch.relu(self.a(x)), -1)
        h = torch.cumsum(torch.sin(self.b(h)), 0)
        g = self.conv(img).flatten(1).cumsum(-1)[:, :16]
        return self.c(h) + g.sum(), h.flip(0)


@pytest.mark.slow
def test_bridge_plans_around_xnnpack_delegates() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = PartlyDelegated().eval()
    args = (torch.randn(8, 32), torch.randn(2, 3, 8, 8))
    with torch.no_grad():
        expected = model(*args)
    exported = torch.export.export(model, args)
    arenas = []
    for bridge in (False, True):
        passes = {"memory_planning_pass": MemoryPlanningPass(
            memory_planning_algo=tensorplan_memory_planning(algorithm="auto"))} if bridge else {}
        program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]) \
            .to_executorch(ExecutorchBackendConfig(**passes))
        graph = program.exported_program().graph_module.graph
        assert sum("executorch_call_delegate" in str(n.target) for n in graph.nodes) >= 2
        for got, want in zip(_execute(program, args), expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        _verify(program)
        arenas.append(_arena(program))
    assert arenas[1] <= arenas[0]
