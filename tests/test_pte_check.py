"""A ``.pte`` checked in ExecuTorch's runtime: ``run_pte``, ``check_pte``, ``to_executorch(...,
check=True)`` and ``tensorplan pte --check``."""

from __future__ import annotations

import sys
import textwrap
import warnings

import pytest
import torch

pytest.importorskip("executorch.runtime")

from tensorplan import InputError, ShipError, zoo  # noqa: E402
from tensorplan.cli import main  # noqa: E402
from tensorplan.integrations.executorch import check_pte, lower, run_pte, to_executorch  # noqa: E402


@pytest.fixture(scope="module")
def linear():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    x = torch.randn(2, 4)
    exported = torch.export.export(model, (x,))
    return model, x, exported, to_executorch(exported).buffer


def test_a_pte_runs_and_its_outputs_outlive_the_next_run(linear, tmp_path):
    model, x, _, pte = linear
    path = tmp_path / "linear.pte"
    path.write_bytes(pte)
    first = run_pte(path, [x])[0]
    second = run_pte(pte, [2 * x])[0]
    with torch.no_grad():
        torch.testing.assert_close(first, model(x))
        torch.testing.assert_close(second, model(2 * x))


def test_check_pte_compares_with_eager(linear):
    model, x, _, pte = linear
    with torch.no_grad():
        good = check_pte(pte, [x], model(x))
        bad = check_pte(pte, [x], model(x) + 1)
    assert (good.method, good.outputs, good.matches) == ("forward", ("float32[2, 3]",), True)
    assert good.max_abs_error < 1e-6
    assert not bad.matches and bad.max_abs_error == pytest.approx(1.0, abs=1e-6)


def test_inputs_the_runtime_refuses_raise_its_own_error(linear):
    _, _, _, pte = linear
    with pytest.raises(ShipError) as refused:
        run_pte(pte, [torch.randn(1, 4)])  # within the bound (2, 4), but that dim is static
    message = str(refused.value)
    assert "refused the .pte's forward on inputs (float32[1, 4])" in message
    assert "Attempted to resize a static tensor" in message  # ExecuTorch's log, captured
    assert "0x10" in message


class Embed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Embedding(10, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.table(tokens) * 2


@pytest.fixture(scope="module")
def embed_pte() -> bytes:
    """A .pte lowered for int64 tokens [1, seq] with seq in [2, 16]."""
    seq = torch.export.Dim("seq", min=2, max=16)
    exported = torch.export.export(Embed().eval(), (torch.zeros(1, 8, dtype=torch.long),),
                                   dynamic_shapes=({1: seq},))
    return to_executorch(exported).buffer


@pytest.mark.parametrize(("inputs", "message"), [
    ([torch.zeros(1, 20, dtype=torch.long)],
     "run_pte: dim 1 of input 0 of the .pte's forward is 20, past the bound 16 the .pte was "
     "lowered for (shape at most (1, 16)); export with a larger Dim max and lower it again"),
    ([torch.zeros(1, 8, dtype=torch.int32)],
     "run_pte: input 0 of the .pte's forward has dtype torch.int32, the .pte takes "
     "torch.int64; convert it with .to(torch.int64)"),
    ([torch.zeros(8, dtype=torch.long)],
     "run_pte: input 0 of the .pte's forward has rank 1 (shape (8,)), the .pte takes rank 2 "
     "(shape at most (1, 16))"),
    ([torch.zeros(1, 8, dtype=torch.long)] * 2,
     "run_pte: the .pte's forward takes 1 inputs, got 2"),
])
def test_inputs_past_the_methods_metadata_are_refused_before_running(embed_pte, inputs,
                                                                     message):
    with pytest.raises(InputError) as refused:
        run_pte(embed_pte, inputs)
    assert str(refused.value).startswith(message)


def test_inputs_within_the_bound_run(embed_pte):
    assert run_pte(embed_pte, [torch.zeros(1, 16, dtype=torch.long)])[0].shape == (1, 16, 4)


def test_a_token_past_the_vocabulary_is_the_kernels_refusal_with_its_reason(embed_pte):
    with pytest.raises(ShipError) as refused:
        run_pte(embed_pte, [torch.full((1, 8), 50)])
    message = str(refused.value)
    assert "operator aten::embedding.out" in message and "50 >= weight.size(0) 10" in message
    assert "with type id" not in message  # the argument list, noise beside the reason
    assert "tensorplan" not in message


def test_a_truncated_pte_is_refused_on_load(linear):
    _, x, _, pte = linear
    with pytest.raises(ShipError, match="Failed to load program.*File size is too small"):
        run_pte(pte[:100], [x])


def test_a_missing_method_is_named(linear):
    _, x, _, pte = linear
    with pytest.raises(ShipError, match="no method 'decode'; it has forward"):
        run_pte(pte, [x], method="decode")


def test_to_executorch_checks_against_the_exported_module(linear):
    model, x, exported, _ = linear
    manager = to_executorch(exported, check=True)
    with torch.no_grad():
        torch.testing.assert_close(run_pte(manager.buffer, [x])[0], model(x))
    shipped = lower(exported, check=True, eager=lambda inputs: model(inputs) * 2)
    assert shipped.check is not None and not shipped.check.matches


def test_the_cli_checks_a_zoo_model(tmp_path, capsys):
    path = tmp_path / "gpt.pte"
    assert main(["pte", "zoo:tiny_gpt", "-o", str(path), "--check"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "check: ExecuTorch's runtime ran forward on the example inputs: " \
           "float32[1, 32, 256], equal to eager" in out
    example = zoo.example("tiny_gpt")
    with torch.no_grad():
        torch.testing.assert_close(run_pte(path, list(example.args))[0],
                                   example.model(*example.args), atol=1e-4, rtol=1e-4)


def test_the_cli_check_exits_1_when_the_pte_differs_from_eager(tmp_path, capsys, monkeypatch):
    """A model whose eager calls differ from its trace (a Python counter is a constant in the
    exported graph): the .pte equals the trace, not the second eager call."""
    (tmp_path / "counting.py").write_text(textwrap.dedent("""
        import torch

        class Counting(torch.nn.Module):
            calls = 0

            def forward(self, x):
                Counting.calls += 1
                return x * Counting.calls

        def make():
            return Counting(), (torch.ones(3),)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "counting", raising=False)
    assert main(["pte", "counting:make", "-o", str(tmp_path / "c.pte"), "--check"]) == 1
    assert "NOT equal to eager" in capsys.readouterr().out


class _PermuteChannelsLast(torch.nn.Module):
    """ConvNeXt's first op on a channels_last image: NCHW -> NHWC."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 3, 1) * 2


def test_a_refusal_executorch_makes_of_its_own_lowering_too_is_said_to_be_its_own():
    x = torch.randn(1, 3, 8, 8).to(memory_format=torch.channels_last)
    exported = torch.export.export(_PermuteChannelsLast(), (x,))
    with pytest.raises(ShipError) as refused:
        lower(exported, check=True)
    message = str(refused.value)
    assert "operator aten::permute_copy.out: 0x12" in message
    assert "ExecuTorch's own lowering of the program (to_edge().to_executorch()) is refused too"\
        in message
    assert "--no-reuse" not in message  # no technique of ours to switch off


def test_a_refusal_of_ours_alone_says_which_switches_to_try(linear):
    from tensorplan.integrations.executorch.check import whose_refusal

    _, _, exported, _ = linear
    assert whose_refusal(exported).startswith(
        "ExecuTorch's own lowering of the program runs: one of tensorplan's techniques broke it;"
        " ship without it (tensorplan pte --no-reuse / --no-reorder / --no-fold;")


def test_check_pte_compares_eager_outputs_that_require_grad_without_a_warning(linear):
    model, x, _, pte = linear
    expected = model(x)  # no torch.no_grad(): the output requires grad
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check_pte(pte, [x], expected)
    assert checked.matches
    assert [str(w.message) for w in caught if "requires_grad" in str(w.message)] == []
