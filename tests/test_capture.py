"""Stage 1: capture to core ATen, from modules, programs and .pt2 files."""

from __future__ import annotations

import pytest
import torch

import tensorplan as tp


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:  # data-dependent Python branch: torch.export cannot trace it
            return x + 1
        return x - 1


def test_capture_decomposes_linear_to_core_aten():
    ep = tp.capture(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == ["aten.permute.default", "aten.addmm.default"]


def test_capture_failure_is_capture_error_with_cause_and_hint():
    with pytest.raises(tp.CaptureError) as info:
        tp.capture(Branchy(), (torch.randn(3),))
    assert info.value.__cause__ is not None
    assert "Branchy" in str(info.value)
    assert "hint: " in str(info.value)
    assert "torch._check" in str(info.value) or "torch.cond" in str(info.value)


def test_capture_requires_example_inputs():
    with pytest.raises(tp.CaptureError, match="example inputs"):
        tp.capture(torch.nn.ReLU())


def test_capture_from_missing_or_foreign_file(tmp_path):
    with pytest.raises(tp.CaptureError, match="no such file"):
        tp.capture(tmp_path / "absent.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"not a zip archive")
    with pytest.raises(tp.CaptureError, match="not a torch.export program"):
        tp.capture(junk)


def test_capture_does_not_modify_a_given_program():
    ep = torch.export.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    before = ep.graph_module.code
    decomposed = tp.capture(ep)
    assert ep.graph_module.code == before
    assert decomposed is not ep


def test_capture_refuses_a_pt2_that_would_run_code(tmp_path):
    import zipfile

    path = tmp_path / "evil.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("evil/archive_format", "pt2")
        archive.writestr("evil/data/constants/custom_obj_0.pt", b"\x80\x04not-a-tensor")
    with pytest.raises(tp.CaptureError, match="holds code or Python objects"):
        tp.capture(path)


class SpecViolationError(Exception):
    """Stands for torch.export's verifier error (same name)."""


@pytest.mark.parametrize("error, hint", [
    (SpecViolationError("Constant tensor lifted_tensor_0 is not in the constants dictionary"),
     "torch.export's verifier rejects it"),
    (RuntimeError("no decomposition for my_op"), "has no core ATen decomposition"),
])
def test_decomposition_failure_hint_fits_the_error(monkeypatch, error, hint):
    ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

    def fail(self, *args, **kwargs):
        raise error

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", fail)
    with pytest.raises(tp.CaptureError, match=hint) as caught:
        tp.capture(ep)
    assert type(error).__name__ in str(caught.value) and caught.value.__cause__ is error


class CondView(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x[1:], lambda x: x[:-1].clone(), (x,))


class CondShift(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[:-1] + 1, (x,))


@pytest.mark.parametrize("model, dynamic_shapes, reason, hint", [
    (CondView(), None, "Higher order ops do not support aliasing", "return a .clone\\(\\) of it"),
    (CondShift(), ({0: torch.export.Dim("m", min=2, max=64)},),
     "Not all values of m", "narrow the range"),
])
def test_export_failure_keeps_the_reason_lines_and_a_fitting_hint(model, dynamic_shapes, reason,
                                                                  hint):
    with pytest.raises(tp.CaptureError, match=f"(?s){reason}.*hint: .*{hint}") as caught:
        tp.capture(model, (torch.randn(6, 3),), dynamic_shapes=dynamic_shapes)
    assert "Developer debug context" not in str(caught.value)


def test_a_program_in_core_aten_is_not_decomposed_again():
    decomposed = tp.capture(torch.nn.Linear(4, 2), (torch.randn(3, 4),))
    assert tp.capture(decomposed) is decomposed


class DynamicCache:
    """Stands for transformers' cache object: a class torch.export cannot flatten."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


class ReturnsCache(torch.nn.Module):
    def forward(self, x):
        return x + 1, DynamicCache(x * 2)


def test_export_failure_on_a_returned_cache_says_so_and_keeps_whole_words():
    with pytest.raises(tp.CaptureError) as caught:
        tp.capture(ReturnsCache(), (torch.randn(3),))
    message = str(caught.value)
    assert "DynamicCache" in message and "in output" in message
    assert ("hint: the model returns an object torch.export cannot flatten (a cache object "
            "such as DynamicCache): pass use_cache=False (transformers) or return plain "
            "tensors") in message
    assert "runs eagerly" not in message
    assert "https://" not in message or "functorch/issues/475" in message  # a URL kept whole
    assert all(len(line) <= 210 for line in message.splitlines())


def _static_cache_llm() -> torch.nn.Module:
    """transformers' static-cache decoder (``TorchExportableModuleForDecoderOnlyLM``'s module)
    over a two-layer Llama with grouped-query attention and a cache of 64 positions."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        use_cache=True, cache_implementation="static", max_length=64,
        cache_config={"batch_size": 1, "max_cache_len": 64})
    return TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=64).model


def test_a_module_whose_non_strict_program_does_not_decompose_is_exported_strict():
    """optimum-executorch's causal-LM recipe: a plain Dim on the token ids and the cache
    positions. torch 2.13's non-strict program of this module fails to decompose; capture
    exports it strict instead, and the program runs equal to eager."""
    pytest.importorskip("transformers")
    module = _static_cache_llm()
    seq = torch.export.Dim("seq_length_dim", max=63)
    shapes = {"input_ids": {1: seq}, "cache_position": {0: seq}}
    example = {"input_ids": torch.randint(0, 128, (1, 8)), "cache_position": torch.arange(8)}
    loose = torch.export.export(module, (), example, dynamic_shapes=shapes, strict=False)
    with pytest.raises(AssertionError, match="compiled_fn"):
        loose.run_decompositions()
    prog = tp.compile(module, (), example, dynamic_shapes=shapes)
    for length in (8, 5):
        inputs = {"input_ids": torch.randint(0, 128, (1, length)),
                  "cache_position": torch.arange(length)}
        with torch.no_grad():  # a fresh cache (the same weights); earlier runs' rows past
            expected = _static_cache_llm()(**inputs)  # the positions are masked
        torch.testing.assert_close(prog.run(**inputs), expected)
