"""Stage 5: programs run out of one arena and agree with eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from shared_models import CondModel, ConvClone, Fn, Loop, Mapped, Scanned, positives
from torch.export import Dim

import tensorplan as tp
from tensorplan import zoo
from tensorplan.runtime.arena import Arena
from tensorplan.runtime.frames import check_layout
from tensorplan.runtime.kernels import out_variant
from tensorplan.zoo.models import KVCache

CL = torch.channels_last
BUILT_IN = ["convnet", "kv_cache", "mlp", "tiny_gpt"]



def same_as_eager(model, args, runs=None, dynamic_shapes=None) -> tp.Program:
    prog = tp.compile(model, args, dynamic_shapes=dynamic_shapes)
    for inputs in runs or [args]:
        torch.testing.assert_close(prog.run(*inputs), model(*inputs))
    return prog


# Functional fallbacks per run: only ops that have no native out-variant on CPU.
EXPECTED_FALLBACKS = {
    "convnet": {"aten.convolution.default": 3},  # batch norm runs native_batch_norm.out
    "kv_cache": {},
    "mlp": {},
    "tiny_gpt": {"aten.native_layer_norm.default": 5},
}


def has_no_native_out_variant(op_name: str) -> bool:
    namespace, packet, overload = op_name.split(".")
    variant = out_variant(getattr(getattr(getattr(torch.ops, namespace), packet), overload))
    return variant is None or variant.generated


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_models_match_eager_with_only_unavoidable_fallbacks(name):
    example = zoo.example(name)
    prog = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
    reference = zoo.example(name)  # same seed: same weights, fresh buffers
    torch.testing.assert_close(prog.run(*example.args), reference.model(*reference.args))
    assert prog.stats == EXPECTED_FALLBACKS[name]
    assert all(has_no_native_out_variant(op) for op in prog.stats)


def test_generated_out_variants_are_avoided_without_allocating_fallbacks():
    def fn(t):
        y = (t.relu() * 2).clone(memory_format=torch.channels_last)  # relu.out is generated
        shifted = torch.full_like(y, 0.5) + torch.scalar_tensor(1.0) + y
        rows = t[0, 0].long().clamp(0, 3)
        return shifted.to(torch.float16), torch.nn.functional.embedding(rows, y[0, 0])
    x = torch.randn(2, 3, 4, 4) * 3
    prog = tp.compile(Fn(fn), (x,))
    torch.testing.assert_close(prog.run(x), Fn(fn)(x))
    assert prog.stats == {}


def test_tiny_gpt_runs_three_sequence_lengths_in_one_arena():
    example = zoo.example("tiny_gpt")
    prog = tp.compile(example.model, example.args, dynamic_shapes=example.dynamic_shapes)
    runner = prog.runner(arena="upper")  # allocated once, at the bounds
    arena = runner.arena.bytes.data_ptr()
    for length in (2, 45, 128):
        tokens = torch.randint(0, 256, (1, length))
        torch.testing.assert_close(runner.run(tokens), example.model(tokens))
    assert runner.arena.bytes.data_ptr() == arena
    assert runner.stats.runs == 3


def test_linear_is_bit_exact():
    model = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    assert torch.equal(tp.compile(model, (x,)).run(x), model(x))


def test_outputs_are_fresh_unless_asked_for_views():
    prog = tp.compile(Fn(lambda t: t * 2), (torch.randn(3),))
    first = prog.run(torch.ones(3))
    prog.run(torch.zeros(3))
    assert torch.equal(first, torch.full((3,), 2.0))
    view = prog.run(torch.ones(3), copy_outputs=False)
    prog.run(torch.full((3,), 5.0), copy_outputs=False)
    assert torch.equal(view, torch.full((3,), 10.0))  # a view into the arena


# --- layouts ------------------------------------------------------------------------------


def test_channels_last_conv_clone_runs_and_returns_channels_last():
    model = ConvClone().to(memory_format=CL)
    x = torch.randn(2, 3, 8, 8).to(memory_format=CL)
    prog = tp.compile(model, (x,))
    out = prog.run(x)
    assert out.is_contiguous(memory_format=CL) and not out.is_contiguous()
    torch.testing.assert_close(out, model(x))


def test_channels_last_input_to_contiguous_program_is_copied_not_reinterpreted():
    model = ConvClone()
    prog = tp.compile(model, (torch.randn(2, 3, 8, 8),))
    x = torch.randn(2, 3, 8, 8).to(memory_format=CL)
    torch.testing.assert_close(prog.run(x), model(x))


def test_size_one_dims_mixed_layouts_are_accepted():
    model = Fn(lambda t: t * 3 + 1)
    prog = tp.compile(model, (torch.randn(2, 3, 1, 1),))
    x = torch.randn(2, 3, 1, 1).to(memory_format=CL)
    torch.testing.assert_close(prog.run(x), model(x))


def test_layout_check_rejects_a_view_whose_memory_is_not_the_spec():
    prog = tp.compile(Fn(lambda t: (t + 1).permute(0, 2, 3, 1) * 2), (torch.randn(2, 3, 4, 4),))
    spec = prog.specs["permute"]
    assert spec.dim_order == (0, 3, 1, 2)
    wrong = torch.empty(2, 4, 4, 3)  # contiguous, but the permuted view is (0, 3, 1, 2)
    with pytest.raises(tp.LayoutError, match="permute"):
        check_layout("permute", wrong, spec, "aten.permute.default")
    check_layout("permute", torch.empty(2, 3, 4, 4).permute(0, 2, 3, 1), spec,
                 "aten.permute.default")


# --- inputs -------------------------------------------------------------------------------

def test_bad_inputs_raise_input_error_naming_input_dim_value_and_bound():
    prog = tp.compile(Fn(lambda t: t.relu()), (torch.randn(2, 8),),
                      dynamic_shapes=({0: Dim("rows", min=2, max=16)},))
    outside = r"dim 0 of input 'x' is 17, outside the range \[2, 16\]"
    with pytest.raises(tp.InputError, match=outside):
        prog.run(torch.randn(17, 8))
    with pytest.raises(tp.InputError, match="dim 1 of input 'x' is 9"):
        prog.run(torch.randn(4, 9))
    with pytest.raises(tp.InputError, match="dtype torch.float64"):
        prog.run(torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(tp.InputError, match="rank 1"):
        prog.run(torch.randn(8))
    with pytest.raises(tp.InputError):
        prog.run(torch.randn(4, 8), torch.randn(4, 8))


class Flags(torch.nn.Module):
    def forward(self, x, flag=False, scale=2, extra=None):
        y = x * scale if flag else x + 1
        return y if extra is None else y + extra


@pytest.mark.parametrize("args, kwargs", [
    ((True,), {}), ((False, 3), {}), ((False, 2, None), {}), ((), {"flag": True, "scale": 5}),
])
def test_constant_arguments_run_as_exported(args, kwargs):
    # torch.export keeps a bool/int/None argument as a constant of the program
    x = torch.randn(3)
    prog = tp.compile(Flags(), (x, *args), kwargs)
    torch.testing.assert_close(prog.run(x, *args, **kwargs), Flags()(x, *args, **kwargs))


def test_a_different_constant_argument_is_an_input_error():
    prog = tp.compile(Flags(), (torch.randn(3), True))
    with pytest.raises(tp.InputError, match="input 'flag' is False, but the program was "
                                            "exported with True"):
        prog.run(torch.randn(3), False)


class Halves(torch.nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=0)
        return a + b


class Shifted(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


def test_derived_dims_are_solved_and_checked():
    n = Dim("n", min=1, max=16)
    halves = same_as_eager(Halves(), (torch.randn(8, 3),), dynamic_shapes=({0: 2 * n},),
                           runs=[(torch.randn(rows, 3),) for rows in (4, 8, 32)])
    with pytest.raises(tp.InputError, match="is 5, but the program was compiled for 2.n: "
                                            "no integer n gives 5"):
        halves.run(torch.randn(5, 3))
    with pytest.raises(tp.InputError, match="outside the range"):
        halves.run(torch.randn(34, 3))
    shifted = same_as_eager(Shifted(), (torch.randn(4), torch.randn(5)),
                            dynamic_shapes=({0: n}, {0: n + 1}),
                            runs=[(torch.randn(6), torch.randn(7))])
    for wrong in (9, 1):  # 1 would broadcast silently if the dim went unchecked
        with pytest.raises(tp.InputError, match=f"input 'y' is {wrong}, but the program was "
                                                r"compiled for n \+ 1 = 7 \(n = 6\)"):
            shifted.run(torch.randn(6), torch.randn(wrong))


# --- data-dependent sizes -----------------------------------------------------------------

class NonZero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x > 0.5) * 2, (x > 0.5).sum()


@pytest.mark.parametrize("scale", [0.0, 0.6, 1.0, 2.0])
def test_nonzero_at_several_densities(scale):
    model = NonZero()
    prog = tp.compile(model, (torch.rand(4, 5),))
    x = torch.rand(4, 5) * scale
    torch.testing.assert_close(prog.run(x), model(x))


def test_data_dependent_size_above_the_planned_bound_is_an_input_error():
    def fn(x):
        y = positives(x)
        torch._check(y.shape[0] <= 4)
        return y * 2
    prog = tp.compile(Fn(fn), (torch.randn(10),))
    torch.testing.assert_close(prog.run(torch.tensor([1.0, -1, 2, -2, 3, -3, -4, -5, -6, -7])),
                               torch.tensor([2.0, 4, 6]))
    with pytest.raises(tp.InputError, match=r"above its planned upper bound \(4,\)"):
        prog.run(torch.ones(10))


def test_item_sized_tensor_at_several_values():
    class Item(torch.nn.Module):
        def forward(self, x, h):
            k = h.item()
            torch._check(k >= 1)
            torch._check(k <= 100)
            return torch.zeros(k) + x.sum()
    same_as_eager(Item(), (torch.randn(3), torch.tensor(5)),
                  runs=[(torch.randn(3), torch.tensor(v)) for v in (1, 7, 100)])


# --- control flow -------------------------------------------------------------------------


def test_cond_runs_both_branches():
    x = torch.randn(4, 3)
    same_as_eager(CondModel(), (x, torch.randn(2)), runs=[(x, torch.ones(2)), (x, -torch.ones(2))])


def test_while_loop_map_and_scan():
    same_as_eager(Loop(), (torch.tensor(0), torch.randn(3)))
    same_as_eager(Mapped(), (torch.randn(5, 2, 3), torch.randn(3, 4)))
    same_as_eager(Scanned(), (torch.randn(3), torch.randn(6, 3)))


# --- state --------------------------------------------------------------------------------

def test_kv_cache_state_persists_and_matches_eager_over_three_runs():
    torch.manual_seed(1)
    eager = KVCache()
    planned = KVCache()
    planned.load_state_dict(eager.state_dict())
    prog = tp.compile(planned, (torch.randn(1, 32), torch.tensor([0])))
    for step in range(3):
        x, pos = torch.randn(1, 32), torch.tensor([step])
        torch.testing.assert_close(prog.run(x, pos), eager(x, pos))
        state = prog.state_dict()
        torch.testing.assert_close(state["k_cache"], eager.k_cache)
        torch.testing.assert_close(state["v_cache"], eager.v_cache)
    assert int((state["k_cache"].abs().sum(1) > 0).sum()) == 3


def test_running_statistics_and_counters_persist():
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.register_buffer("total", torch.zeros(4))

        def forward(self, x):
            self.count.add_(1)
            self.total.add_(x)
            return self.total / self.count

    eager, planned = Counter(), Counter()
    prog = tp.compile(planned, (torch.randn(4),))
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(prog.run(x), eager(x))
    assert float(prog.state_dict()["count"]) == 3.0


# --- state that is tricky to write back --------------------------------------------------

class Stateful(torch.nn.Module):
    """Buffers ``a`` (4,), ``b`` (4,), ``m`` (3, 3), ``i`` int64 (4,), ``r`` (8,), updated by
    ``step(self, x)``."""

    def __init__(self, step) -> None:
        super().__init__()
        self.step = step
        self.register_buffer("a", torch.arange(4.0))
        self.register_buffer("b", torch.full((4,), 5.0))
        self.register_buffer("m", torch.arange(9.0).reshape(3, 3))
        self.register_buffer("i", torch.zeros(4, dtype=torch.int64))
        self.register_buffer("r", torch.arange(8.0))

    def forward(self, x):
        return self.step(self, x)


def _swap(s, x):
    out = x + s.a + 10 * s.b
    old = s.a.clone()
    s.a.copy_(s.b)
    s.b.copy_(old)
    return out


def _from_mutated_input(s, x):
    s.a.copy_(x)
    x.add_(1)
    return x.sum()


def _parallel_assignment(s, x):
    s.b.copy_(s.a)
    s.a.mul_(2)
    return x + s.b


def _transposed(s, x):
    s.m.copy_(s.m.t() * 2)
    return s.m.sum() + x


def _broadcast_cast_and_slice(s, x):
    y = x * 2
    s.m.fill_(x.sum())
    s.i.copy_(x * 3.7)
    s.b.copy_(torch.cat([y, y])[2:6])
    return x + 1


def _reads_old(s, x):
    s.r.copy_(torch.cat([s.r[1:], x[:1]]))
    s.a.copy_(s.a - s.a[3])
    return s.r * 1 + s.a.sum()


@pytest.mark.parametrize("step", [_swap, _from_mutated_input, _parallel_assignment, _transposed,
                                  _broadcast_cast_and_slice, _reads_old])
def test_state_updates_match_eager_over_three_runs(step):
    # new state that reads other state, an input, its own old value or the wrong layout must be
    # written back after the run (all at once), not computed over the old state
    eager, planned = Stateful(step), Stateful(step)
    prog = tp.compile(planned, (torch.randn(4),))
    for _ in range(3):
        x = torch.randn(4)
        x_eager, x_planned = x.clone(), x.clone()
        torch.testing.assert_close(prog.run(x_planned), eager(x_eager))
        torch.testing.assert_close(x_planned, x_eager)
        state = prog.state_dict()
        assert state  # every step writes some buffer
        for name, value in state.items():
            torch.testing.assert_close(value, eager.get_buffer(name), msg=name)


def test_index_put_cache_still_updates_in_place():
    # the producer reads the old cache only as its first argument and has an in-place twin:
    # each new cache shares its buffer's storage (no write-back copy)
    prog = tp.compile(KVCache(), zoo.example("kv_cache").args)
    signature = prog.exported_program.graph_signature
    placeholder = {target: name for name, target in signature.inputs_to_buffers.items()}
    for new, target in signature.buffers_to_mutate.items():
        assert prog.specs[new].storage == prog.specs[placeholder[target]].storage


@pytest.mark.parametrize("fn", [
    lambda x: torch.as_strided(x + 1, (3, 3), (2, 1), 1),
    lambda x: torch.as_strided(x * 2, (2, 4), (6, 1), storage_offset=5),
    lambda x: torch.as_strided(x - 1, (3, 2), (1, 6)),
])
def test_as_strided_offsets_count_from_the_base_storage(fn):
    # the base is planned at a non-zero arena offset (no reuse of x's storage): eager counts
    # storage_offset from the base's own storage
    prog = tp.compile(Fn(fn), (torch.randn(4, 6),), reuse=False)
    x = torch.randn(4, 6)
    torch.testing.assert_close(prog.run(x), Fn(fn)(x))
    assert any(s.offset > 0 for s in prog.plan.storages.values())


def test_input_count_device_and_arena_errors_are_one_line_tensorplan_errors():
    prog = tp.compile(Fn(lambda t: t + 1), (torch.randn(3),))
    with pytest.raises(tp.InputError, match=r"^runtime: the inputs are not structured as at "
                                            r"compile time: 2 positional argument\(s\) \(2 leaves\)"
                                            r", the program takes 1 positional argument\(s\)"):
        prog.run(torch.randn(3), torch.randn(3))
    with pytest.raises(tp.InputError, match="input 'x' is on meta; the program runs on the CPU"):
        prog.run(torch.empty(3, device="meta"))
    with pytest.raises(tp.PlanError, match=r"cannot allocate the 1,125,899,906,842,624 B "
                                           r"\(1048576.0 GiB\) arena"):
        Arena(1 << 50)
