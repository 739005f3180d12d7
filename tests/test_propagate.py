"""Stage 2: every value gets a TensorSpec from one trace; values asserted exactly."""

from __future__ import annotations

import pytest
import torch
from shared_models import CondModel, ConvClone, Fn, Loop, Mapped, Scanned, positives
from torch.export import Dim

import tensorplan as tp
from tensorplan.specs.layout import same_layout
from tensorplan.zoo.models import MLP

F32, F16, I64 = torch.float32, torch.float16, torch.int64
CL = torch.channels_last


def specs_of(model, *args, dynamic_shapes=None) -> tp.SpecTable:
    return tp.propagate(tp.capture(model, args, dynamic_shapes=dynamic_shapes))


def output_specs(model, *args, dynamic_shapes=None) -> list[tp.TensorSpec]:
    ep = tp.capture(model, args, dynamic_shapes=dynamic_shapes)
    specs = tp.propagate(ep)
    output = next(n for n in ep.graph.nodes if n.op == "output")
    return [specs[a.name] for a in output.args[0]]



# --- dense models -------------------------------------------------------------------------

def test_mlp_specs():
    specs = specs_of(MLP(8, 16, 4), torch.randn(3, 8))
    assert specs["x"] == tp.TensorSpec((3, 8), (3, 8), F32, (0, 1), (8, 1), 96)
    assert specs["p_fc1_weight"] == tp.TensorSpec((16, 8), (16, 8), F32, (0, 1), (8, 1), 512,
                                                  const=True)
    assert specs["p_fc2_bias"].const and specs["p_fc2_bias"].shape == (4,)
    # linear's transposed weight is a (1, 0)-ordered view of the parameter
    assert specs["permute"].dim_order == (1, 0) and specs["permute"].shape == (8, 16)
    assert specs["addmm"] == tp.TensorSpec((3, 16), (3, 16), F32, (0, 1), (16, 1), 192)
    assert specs["addmm_1"].shape == (3, 4) and specs["addmm_1"].nbytes == 48
    assert all(spec.storage is None for _, spec in specs.tensors())


# --- layouts ------------------------------------------------------------------------------


def test_channels_last_conv_then_clone_keeps_channels_last():
    model = ConvClone().to(memory_format=CL)
    x = torch.randn(1, 3, 8, 8).to(memory_format=CL)
    (out,) = output_specs(model, x)
    assert out.dim_order == (0, 2, 3, 1)
    assert out.strides == (512, 1, 64, 8)
    assert out.dim_order == model(x).dim_order()


def test_to_float16_on_channels_last_keeps_layout():
    x = torch.randn(2, 4, 5, 6).to(memory_format=CL)
    (out,) = output_specs(Fn(lambda t: (t * 2).to(torch.float16)), x)
    assert (out.dtype, out.dim_order, out.nbytes) == (F16, (0, 2, 3, 1), 2 * 4 * 5 * 6 * 2)


def test_explicit_contiguous_clone_of_channels_last_is_contiguous():
    x = torch.randn(2, 4, 5, 6).to(memory_format=CL)
    (out,) = output_specs(Fn(lambda t: (t + 1).clone(memory_format=torch.contiguous_format)), x)
    assert out.dim_order == (0, 1, 2, 3) and out.strides == (120, 30, 6, 1)


def test_explicit_channels_last_to_copy_of_contiguous():
    (out,) = output_specs(Fn(lambda t: (t + 1).to(memory_format=CL)), torch.randn(2, 4, 5, 6))
    assert out.dim_order == (0, 2, 3, 1)


def test_empty_like_preserves_layout():
    x = torch.randn(2, 4, 5, 6).to(memory_format=CL)
    (out,) = output_specs(Fn(lambda t: torch.empty_like(t).fill_(1.0) + t), x)
    assert out.dim_order == (0, 2, 3, 1)


@pytest.mark.parametrize("shape", [(2, 1, 4, 5), (2, 3, 1, 1), (2, 1, 1, 5)])
def test_channels_last_with_size_one_dims_is_canonical(shape):
    x = torch.randn(shape).to(memory_format=CL)
    (out,) = output_specs(Fn(lambda t: t.relu().clone()), x)
    # the traced value is channels_last; eager may report (0, 1, 2, 3): the same bytes
    assert out.dim_order == (0, 2, 3, 1)
    assert same_layout(shape, out.dim_order, x.relu().clone().dim_order())


def test_rank5_channels_last():
    x = torch.randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d)
    (out,) = output_specs(Fn(lambda t: t.relu().clone()), x)
    assert out.dim_order == (0, 2, 3, 4, 1)
    assert out.strides == (360, 1, 90, 18, 3)


def test_rank3_channels_last():
    x = torch.randn(2, 5, 3).transpose(1, 2)  # (N, C, L) with C innermost
    (out,) = output_specs(Fn(lambda t: t.relu().clone()), x)
    assert out.shape == (2, 3, 5)
    assert out.dim_order == (0, 2, 1) and out.strides == (15, 1, 3)


# --- multi-output, 0-d, zero-size, bool -----------------------------------------------------

def test_max_with_indices_has_int64_output():
    ep = tp.capture(Fn(lambda t: t.max(dim=1)), (torch.randn(4, 7),))
    specs = tp.propagate(ep)
    node = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.max.dim)
    values, indices = specs[node.name]
    assert (values.shape, values.dtype, values.nbytes) == ((4,), F32, 16)
    assert (indices.shape, indices.dtype, indices.nbytes) == ((4,), I64, 32)


def test_split_gives_one_spec_per_piece():
    ep = tp.capture(Fn(lambda t: [p * 2 for p in (t + 1).split([2, 3], dim=1)]),
                    (torch.randn(4, 5),))
    specs = tp.propagate(ep)
    node = next(n for n in ep.graph.nodes if "split" in str(n.target))
    first, second = specs[node.name]
    assert first.shape == (4, 2) and second.shape == (4, 3)
    assert first.dim_order == second.dim_order == (0, 1)


def test_native_layer_norm_outputs():
    ep = tp.capture(torch.nn.LayerNorm(8), (torch.randn(2, 5, 8),))
    specs = tp.propagate(ep)
    node = next(n for n in ep.graph.nodes if n.target == torch.ops.aten.native_layer_norm.default)
    out, mean, rstd = specs[node.name]
    assert out.shape == (2, 5, 8) and out.nbytes == 320
    assert mean.shape == rstd.shape == (2, 5, 1)


def test_zero_dim_zero_size_and_bool():
    def fn(t):
        return t.sum(), t[:, :0] + 1, t > 0
    total, empty, mask = output_specs(Fn(fn), torch.randn(3, 4))
    assert (total.shape, total.dim_order, total.strides, total.nbytes) == ((), (), (), 4)
    assert (empty.shape, empty.nbytes) == ((3, 0), 0)
    assert (mask.dtype, mask.nbytes) == (torch.bool, 12)


# --- bounds -------------------------------------------------------------------------------

def test_dynamic_seq_upper_bound_reaches_every_dependent_dim():
    model = Fn(lambda t: torch.cat([t, t], dim=1).relu())
    seq = Dim("seq", min=2, max=128)
    ep = tp.capture(model, (torch.randn(2, 10, 4),), dynamic_shapes=({1: seq},))
    specs = tp.propagate(ep)
    assert specs["x"].shape == (2, 128, 4)
    assert isinstance(specs["x"].sym_shape[1], torch.SymInt)
    (out,) = [specs[a.name] for a in next(n for n in ep.graph.nodes if n.op == "output").args[0]]
    assert out.shape == (2, 256, 4) and out.nbytes == 2 * 256 * 4 * 4


def test_nonzero_is_bounded_by_numel_and_ordered_from_strides():
    (out,) = output_specs(Fn(lambda t: torch.nonzero(t)), torch.randn(4, 5))
    assert out.shape == (20, 2) and out.dtype == I64
    assert out.dim_order == (1, 0)
    assert out.nbytes == 20 * 2 * 8


def test_item_bounded_by_torch_check():
    def fn(h):
        k = h.item()
        torch._check(k >= 1)
        torch._check(k <= 100)
        return torch.zeros(k) + 1
    (out,) = output_specs(Fn(fn), torch.tensor(5))
    assert out.shape == (100,) and out.nbytes == 400


def test_custom_op_unbacked_size_takes_the_checked_bound():
    def fn(x):
        y = positives(x.flatten())
        torch._check(y.shape[0] <= 50)
        return y * 2
    (out,) = output_specs(Fn(fn), torch.randn(4, 6))
    assert out.shape == (50,) and out.nbytes == 200


def test_unbounded_dim_raises_naming_symbol_and_node():
    def fn(x):
        return positives(x) * 2
    ep = tp.capture(Fn(fn), (torch.randn(6),))
    with pytest.raises(tp.UnboundedShapeError) as info:
        tp.propagate(ep)
    message = str(info.value)
    assert "positives" in message and "u" in message and "torch._check" in message


def test_unbounded_input_dim_raises():
    ep = tp.capture(Fn(lambda t: t + 1), (torch.randn(4, 3),),
                    dynamic_shapes=({0: Dim("batch", min=2)},))
    with pytest.raises(tp.UnboundedShapeError, match="Dim"):
        tp.propagate(ep)


# --- control flow -------------------------------------------------------------------------


def test_cond_branches_and_output_bounds():
    ep = tp.capture(CondModel(), (torch.randn(4, 3), torch.randn(2)))
    specs = tp.propagate(ep)
    full, part = specs["cond"]
    assert full.shape == (4, 3)
    assert part.shape == (3, 3) and isinstance(part.sym_shape[0], torch.SymInt)
    assert specs["true_graph_0/cos"].shape == (2, 3)
    assert specs["false_graph_0/exp"].shape == (3, 3)
    assert specs["true_graph_0/x"].shape == (4, 3)


def test_while_loop_body_specs():
    ep = tp.capture(Loop(), (torch.tensor(0), torch.randn(3)))
    specs = tp.propagate(ep)
    assert specs["while_loop_cond_graph_0/lt"].dtype == torch.bool
    assert specs["while_loop_body_graph_0/add_1"].shape == (3,)
    counter, values = specs["while_loop"]
    assert counter.dtype == I64 and values.shape == (3,)


def test_map_body_sees_one_slice():
    ep = tp.capture(Mapped(), (torch.randn(5, 2, 3), torch.randn(3, 4)))
    specs = tp.propagate(ep)
    assert specs["body_graph_0/xs"].shape == (2, 3)
    assert specs["body_graph_0/mm"].shape == (2, 4)
    assert specs["map_impl"][0].shape == (5, 2, 4)


def test_scan_combine_specs():
    specs = specs_of(Scanned(), torch.randn(3), torch.randn(6, 3))
    assert specs["scan_combine_graph_0/mul"].shape == (3,)
    carry, stacked = specs["scan"]
    assert carry.shape == (3,) and stacked.shape == (6, 3)


# --- purity, idempotence, files -------------------------------------------------------------

def test_propagate_is_pure_and_idempotent():
    ep = tp.capture(Fn(lambda t: torch.nonzero(t.relu())), (torch.randn(4, 5),),
                    dynamic_shapes=({0: Dim("rows", min=2, max=16)},))
    code = ep.graph_module.code
    metas = {n.name: dict(n.meta) for n in ep.graph.nodes}
    first, second = tp.propagate(ep), tp.propagate(ep)
    assert first == second
    assert ep.graph_module.code == code
    for node in ep.graph.nodes:
        assert node.meta.keys() == metas[node.name].keys()
        assert node.meta.get("val") is metas[node.name].get("val")
    nonzero = next(spec for name, spec in first.tensors() if name.startswith("nonzero"))
    assert nonzero.shape == (16 * 5, 2)


def test_saved_and_reloaded_program_gives_same_specs(tmp_path):
    model = Fn(lambda t: (t @ t.transpose(1, 2)).softmax(-1))
    seq = Dim("seq", min=2, max=64)
    ep = tp.capture(model, (torch.randn(2, 8, 4),), dynamic_shapes=({1: seq},))
    path = tmp_path / "model.pt2"
    torch.export.save(ep, path)
    reloaded = tp.propagate(tp.capture(path))
    original = tp.propagate(ep)
    assert list(reloaded) == list(original)
    for name, spec in original.tensors():
        other = dict(reloaded.tensors())[name]
        assert (other.shape, other.dtype, other.dim_order, other.nbytes) == \
            (spec.shape, spec.dtype, spec.dim_order, spec.nbytes)
    assert dict(original.tensors())["_softmax"].shape == (2, 64, 64)


class Padded(torch.nn.Module):
    """A linear layer (so pad's input requires grad), then a zero pad, as in HF's Swin."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.nn.functional.pad(self.linear(x), (0, 0, 0, 0, 0, 0)) * 2


def test_retrace_adds_no_guard_to_a_fresh_shape_env(tmp_path):
    # constant_pad_nd's C++ kernel reads concrete sizes unless the Python dispatcher is on: a
    # re-trace in a freshly loaded program's ShapeEnv used to guard Eq(batch, 2) and plan the
    # dynamic batch at its example size, with grad mode on or off
    model = Padded()
    with torch.no_grad():
        ep = tp.capture(model, (torch.randn(2, 8, 8, 3),),
                        dynamic_shapes=({0: Dim("batch", min=1, max=4)},))
    path = tmp_path / "pad.pt2"
    torch.export.save(ep, path)
    reloaded = tp.capture(path)
    shape_env = next(n.meta["val"] for n in reloaded.graph.nodes if n.op == "placeholder") \
        .fake_mode.shape_env
    guards, replacements = len(shape_env.guards), dict(shape_env.replacements)
    with torch.enable_grad():
        specs = tp.propagate(reloaded)
    # a guard the ShapeEnv's own ranges already imply (batch != 1) tells it nothing new
    added = [guard.expr for guard in shape_env.guards[guards:]]
    assert all(bool(shape_env._maybe_evaluate_static(expr)) for expr in added), added
    assert dict(shape_env.replacements) == replacements
    assert specs["x"].shape == (4, 8, 8, 3)
    assert dict(specs.tensors())["constant_pad_nd"].shape == (4, 8, 8, 3)
    prog = tp.compile(path)
    x = torch.randn(4, 8, 8, 3)
    with torch.no_grad():
        torch.testing.assert_close(prog.run(x), model(x))


def test_opaque_call_keeps_the_spec_it_carries_and_is_not_retraced():
    ep = tp.capture(Fn(lambda t: (t.relu() * 2).sum(0)), (torch.randn(3, 4),))
    node = next(n for n in ep.graph.nodes if n.name == "mul")

    def lowered_delegate(x):
        raise AssertionError("an opaque call must not be re-traced")

    carried = tp.TensorSpec((3, 4), (3, 4), F32, (0, 1), (4, 1), 48)
    node.target = lowered_delegate  # stands for a delegate call that already has its spec
    node.meta["spec"] = carried
    ep.graph_module.recompile()
    specs = tp.propagate(ep)
    assert specs["mul"] is carried
    assert specs["sum_1"].shape == (4,)  # downstream values still get fresh specs
