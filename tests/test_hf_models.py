"""Memory plans of the ``transformers`` models of ``tensorplan.zoo.hf`` (random weights).

Each model is compiled once per test process (about 45 s for all fourteen on one core); the
newer families are checked in ``test_zoo_families.py`` with these tables and helpers.
"""

from __future__ import annotations

import pytest
import torch
from zoo_programs import check_plan_is_tight, compiled, listed_in_a_fresh_process

import tensorplan as tp

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

HF_NAMES = ["hf_bart", "hf_bert", "hf_bert_batch_dynamic", "hf_bert_dynamic", "hf_convnext",
            "hf_deit", "hf_dinov2", "hf_distilbert", "hf_falcon", "hf_gemma2", "hf_gpt2",
            "hf_gpt2_dynamic", "hf_llama", "hf_llama_static_cache", "hf_mistral",
            "hf_mobilenet_v2", "hf_mobilevit", "hf_olmoe", "hf_phi3", "hf_qwen2_moe",
            "hf_qwen3_prefill", "hf_resnet", "hf_swin", "hf_t5", "hf_t5_encoder", "hf_vit",
            "hf_wav2vec2", "hf_whisper_decoder"]
# The architectures added for the bound-lowering bench (issue 11), checked without named views.
MORE_ARCHITECTURES = ["hf_convnext", "hf_deit", "hf_distilbert", "hf_llama", "hf_mobilevit",
                      "hf_resnet", "hf_swin", "hf_t5_encoder"]

# Ops whose schema makes the output a view of the first argument, as they occur in these graphs.
VIEW_OPS = {torch.ops.aten.view.default, torch.ops.aten.permute.default,
            torch.ops.aten.expand.default, torch.ops.aten.unsqueeze.default,
            torch.ops.aten.alias.default, torch.ops.aten.slice.Tensor}

# (parameters, buffers) lifted into each program: none of them may be in the arena.
CONSTANTS = {"hf_gpt2": (29, 0), "hf_gpt2_dynamic": (29, 0), "hf_bert": (39, 2),
             "hf_bert_dynamic": (39, 2), "hf_vit": (40, 0), "hf_mobilenet_v2": (158, 156),
             "hf_llama": (21, 2), "hf_t5_encoder": (20, 0), "hf_distilbert": (36, 1),
             "hf_deit": (41, 0), "hf_convnext": (65, 0), "hf_mobilevit": (251, 96),
             "hf_resnet": (38, 36), "hf_swin": (82, 4), "hf_bart": (94, 1), "hf_t5": (50, 0),
             "hf_olmoe": (25, 2), "hf_qwen2_moe": (35, 2), "hf_wav2vec2": (47, 0),
             "hf_llama_static_cache": (21, 8), "hf_bert_batch_dynamic": (39, 2)}

# Bytes of each graph output's storage (batch 1, float32, 16-byte aligned).
OUTPUT_BYTES = {"hf_gpt2": [64 * 1000 * 4], "hf_gpt2_dynamic": [64 * 1000 * 4],
                "hf_bert": [64 * 128 * 4, 128 * 4], "hf_bert_dynamic": [64 * 128 * 4, 128 * 4],
                "hf_vit": [48], "hf_mobilenet_v2": [48], "hf_llama": [64 * 1000 * 4],
                "hf_t5_encoder": [64 * 128 * 4], "hf_distilbert": [64 * 128 * 4],
                "hf_deit": [48], "hf_convnext": [48], "hf_mobilevit": [48], "hf_resnet": [48],
                "hf_swin": [48], "hf_bart": [16 * 1000 * 4], "hf_t5": [16 * 1000 * 4],
                "hf_olmoe": [32 * 1000 * 4], "hf_qwen2_moe": [32 * 1000 * 4],
                "hf_wav2vec2": [399 * 64 * 4], "hf_llama_static_cache": [1000 * 4],
                "hf_bert_batch_dynamic": [4 * 64 * 128 * 4, 4 * 128 * 4]}

# Concrete activation views in the static graphs: (view node, the node it views).
ACTIVATION_VIEWS = {
    "hf_gpt2": [("view_1", "getitem"), ("permute", "view_3"), ("expand_9", "permute_8"),
                ("view_41", "mm")],
    "hf_bert": [("view", "clone"), ("permute_1", "view_2"), ("expand_2", "bitwise_and_1")],
    "hf_vit": [("view", "convolution"), ("permute", "view"), ("expand_2", "mul")],
    "hf_mobilenet_v2": [("view", "mean")],
}

# A transposed linear weight (a view of a parameter) in each static graph: (view, parameter).
WEIGHT_VIEWS = {
    "hf_gpt2": ("permute_14", "p_model_lm_head_weight"),
    "hf_bert": ("permute", "p_model_encoder_layer_0_attention_self_query_weight"),
    "hf_vit": ("permute_1", "p_model_vit_layers_0_attention_q_proj_weight"),
    "hf_mobilenet_v2": ("permute", "p_model_classifier_weight"),
}


def storage(program: tp.Program, name: str) -> int | None:
    """The storage id of the single-tensor value ``name``."""
    spec = program.specs[name]
    assert isinstance(spec, tp.TensorSpec), f"{name} is not a single tensor: {spec!r}"
    return spec.storage


def test_zoo_lists_hf_models_without_importing_transformers() -> None:
    assert listed_in_a_fresh_process(("hf_",), ("transformers",)) == (HF_NAMES,
                                                                      {"transformers": False})


def check_constants_have_no_storage(name: str, program: tp.Program) -> None:
    """Every parameter and buffer is a constant with no storage, and no storage holds one."""
    signature = program.exported_program.graph_signature
    parameters, buffers = list(signature.inputs_to_parameters), list(signature.inputs_to_buffers)
    assert (len(parameters), len(buffers)) == CONSTANTS[name]
    for constant in parameters + buffers:
        spec = program.specs[constant]
        assert spec.const and spec.storage is None, constant
    planned = {value for s in program.plan.storages.values() for value in s.values}
    assert planned.isdisjoint(parameters + buffers)


def check_views_cost_nothing(program: tp.Program) -> None:
    """Every view has its base's storage, and no planned storage is defined by a view."""
    nodes = {node.name: node for node in program.exported_program.graph.nodes}
    views = [node for node in nodes.values() if node.target in VIEW_OPS]
    assert len(views) >= 2
    for node in views:
        assert storage(program, node.name) == storage(program, node.args[0].name), node.name
    for planned in program.plan.storages.values():
        first = nodes.get(planned.values[0].partition("[")[0])
        assert first is None or first.target not in VIEW_OPS, planned


def check_output_sizes(name: str, program: tp.Program) -> None:
    """Each graph output's storage has exactly the output's aligned size."""
    outputs = program.exported_program.graph_signature.user_outputs
    sizes = [program.plan.storages[storage(program, out)].size for out in outputs]
    assert sizes == OUTPUT_BYTES[name]


def check_concrete_views(name: str, program: tp.Program) -> None:
    """The listed activation views share their base's storage; the transposed weight has none."""
    nodes = {node.name: node for node in program.exported_program.graph.nodes}
    for view, base in ACTIVATION_VIEWS[name]:
        assert nodes[view].target in VIEW_OPS and nodes[view].args[0].name == base
        assert storage(program, base) is not None
        assert storage(program, view) == storage(program, base), (view, base)
        assert view in program.plan.storages[storage(program, base)].values
    view, weight = WEIGHT_VIEWS[name]
    assert nodes[view].target is torch.ops.aten.permute.default
    assert nodes[view].args[0].name == weight
    assert storage(program, weight) is None and storage(program, view) is None


def check_model_plan(name: str, program: tp.Program) -> None:
    """Tight plan, constants outside the arena, free views, outputs of their exact size."""
    check_plan_is_tight(program)
    check_constants_have_no_storage(name, program)
    check_views_cost_nothing(program)
    check_output_sizes(name, program)


@pytest.mark.parametrize("name", ["hf_bert", "hf_gpt2", "hf_mobilenet_v2", "hf_vit"])
def test_static_model_plan(name: str) -> None:
    program = compiled(name)
    check_model_plan(name, program)
    check_concrete_views(name, program)


@pytest.mark.parametrize("name", MORE_ARCHITECTURES)
def test_more_architectures_plan(name: str) -> None:
    program = compiled(name)
    check_model_plan(name, program)


@pytest.mark.parametrize("name", ["hf_bert_dynamic", "hf_gpt2_dynamic"])
def test_dynamic_model_plan_at_upper_bound(name: str) -> None:
    program = compiled(name)
    check_model_plan(name, program)
    first_input = program.specs[program.exported_program.graph_signature.user_inputs[0]]
    assert first_input.shape == (1, 64) and first_input.is_dynamic
    static = compiled(name.removesuffix("_dynamic")).plan
    assert program.plan.arena_bytes == static.arena_bytes
    assert program.plan.lower_bound_bytes == static.lower_bound_bytes
