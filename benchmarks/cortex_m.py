"""A model through ExecuTorch 1.5.1's own Cortex-M flow, as ``backends/cortex_m/test/tester.py``
runs it: strict export, ``CortexMQuantizer`` PT2E quantization (calibrated on a few random
images), ``to_edge`` with ``cortex_m_edge_compile_config``, ``CortexMPassManager`` for a
Cortex-M55. Shared by ``bench_int8.py`` and ``tests/test_cortex_m.py``, so both measure the same
program. Needs the ``executorch`` extra (with ``tosa-tools``, which the quantizer imports).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

CALIBRATION_IMAGES = 4


@dataclass(frozen=True)
class CortexMFlow:
    """What the flow made of one model."""

    manager: object                       # the EdgeProgramManager of the Cortex-M program
    quantized: torch.export.ExportedProgram  # the PT2E program before the Cortex-M passes


def through_cortex_m(model: torch.nn.Module, image: Callable[[], torch.Tensor]) -> CortexMFlow:
    """``model`` (eval mode) quantized int8 for a Cortex-M55 on ``CALIBRATION_IMAGES`` images
    from ``image`` (a channels-last NCHW tensor each) and passed through the Cortex-M passes."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import EdgeProgramManager, to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    example = (image(),)
    logging.disable(logging.WARNING)  # the passes log every activation they do not fuse
    try:
        captured = torch.export.export(model, example, strict=True).module(check_guards=False)
        prepared = prepare_pt2e(captured, CortexMQuantizer())
        for _ in range(CALIBRATION_IMAGES):
            prepared(image())
        quantized = torch.export.export(convert_pt2e(prepared), example, strict=True)
        config = cortex_m_edge_compile_config()
        program = CortexMPassManager(
            to_edge(quantized, compile_config=config).exported_program(),
            target_config=CortexMTargetConfig(cpu=CortexM.M55)).transform()
    finally:
        logging.disable(logging.NOTSET)
    return CortexMFlow(EdgeProgramManager({"forward": program}, compile_config=config),
                       quantized)


def executorch_planned_bytes(manager: object, inputs_in_arena: bool = True) -> int:
    """The bytes ExecuTorch's own memory planning gives the Cortex-M program (its default
    ``to_executorch``; ``inputs_in_arena=False``: its ``alloc_graph_input=False``, the input
    not planned), lowered from a copy: ``to_executorch`` rewrites its program in place."""
    from executorch.exir import EdgeProgramManager, ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    program = copy.deepcopy(manager.exported_program())  # type: ignore[attr-defined]
    config = ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=inputs_in_arena))
    lowered = EdgeProgramManager({"forward": program},
                                 compile_config=manager.compile_config  # type: ignore[attr-defined]
                                 ).to_executorch(config)
    return sum(lowered.executorch_program.execution_plan[0].non_const_buffer_sizes)
