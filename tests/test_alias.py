"""Stage 3: storage sharing from schemas and the signature; asserted per value."""

from __future__ import annotations

import torch
from shared_models import Fn

import tensorplan as tp

# The alias stage alone: no in-place reuse, reordering or folding on top (test_reuse.py).
ALIAS_ONLY = {"reuse": False, "reorder": False, "fold": False}


def compiled(fn, *args):
    return tp.compile(Fn(fn), args, **ALIAS_ONLY)


def storage(prog: tp.Program, name: str) -> int | None:
    return prog.specs[name].storage


def test_views_share_storage_and_cost_nothing():
    def fn(x):
        y = x.relu()
        return (y.view(4, 6).permute(1, 0).unsqueeze(0) * 2).sum()
    prog = compiled(fn, torch.randn(2, 12))
    relu = storage(prog, "relu")
    assert storage(prog, "view") == storage(prog, "permute") == storage(prog, "unsqueeze") == relu
    assert prog.plan.storages[relu].values == ("relu", "view", "permute", "unsqueeze")
    # x (96 B) and relu (96 B) are live together; the views add nothing
    assert prog.plan.arena_bytes == prog.plan.lower_bound_bytes == 96 + 96


def test_linear_weight_transpose_is_a_constant_view():
    prog = tp.compile(torch.nn.Linear(8, 4), (torch.randn(2, 8),), **ALIAS_ONLY)
    assert prog.specs["permute"].storage is None and prog.specs["p_weight"].storage is None
    assert prog.specs["permute"].const  # a view of a constant is constant data
    assert prog.plan.arena_bytes == 64 + 32  # input + output only


def test_split_pieces_share_their_input():
    prog = compiled(lambda x: [p * 2 for p in (x + 1).split(2, dim=0)], torch.randn(6, 3))
    add = storage(prog, "add")
    pieces = prog.specs["split_with_sizes"]
    assert [p.storage for p in pieces] == [add, add, add]
    assert storage(prog, "getitem") == storage(prog, "getitem_2") == add


def test_same_tensor_returned_twice_is_one_storage():
    class Twice(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            return y, y

    prog = tp.compile(Twice(), (torch.randn(5),), **ALIAS_ONLY)
    assert len([s for s in prog.plan.storages.values() if s.kind == "activation"]) == 1
    mul = prog.plan.storages[storage(prog, "mul")]
    assert mul.end == len(list(prog.exported_program.graph.nodes))


def test_returning_the_input_or_a_view_of_it_is_the_input_storage():
    ident = compiled(lambda x: x, torch.randn(4, 2))
    assert list(ident.plan.storages) == [storage(ident, "x")]
    viewed = compiled(lambda x: x.view(-1), torch.randn(4, 2))
    assert storage(viewed, "view") == storage(viewed, "x")
    assert viewed.plan.arena_bytes == 32


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("table", torch.zeros(8, 4))

    def forward(self, x, idx):
        self.count.add_(1)
        self.table.index_put_((idx,), x)
        return self.table.sum(0) + self.count


def test_buffers_updated_in_place_are_one_state_storage_for_the_whole_program():
    prog = tp.compile(Counter(), (torch.randn(2, 4), torch.tensor([1, 3])), **ALIAS_ONLY)
    steps = len(list(prog.exported_program.graph.nodes))
    for buffer, update in (("b_count", "add"), ("b_table", "index_put")):
        sid = storage(prog, buffer)
        assert storage(prog, update) == sid
        planned = prog.plan.storages[sid]
        assert (planned.kind, planned.start, planned.end) == ("state", 0, steps)
    assert prog.alias.write_back == ()


def test_kv_cache_index_copy_shares_the_cache_storage():
    from tensorplan.zoo.models import KVCache

    prog = tp.compile(KVCache(), (torch.randn(1, 32), torch.tensor([2])), **ALIAS_ONLY)
    for buffer in ("b_k_cache", "b_v_cache"):
        sid = storage(prog, buffer)
        assert prog.plan.storages[sid].kind == "state"
        assert prog.plan.storages[sid].size == 16 * 32 * 4
    # index_copy_ decomposes to index_put in core ATen
    assert storage(prog, "index_put") == storage(prog, "b_k_cache")
    assert storage(prog, "index_put_1") == storage(prog, "b_v_cache")


def test_state_set_from_an_input_is_written_back_not_shared():
    class CopyIn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("acc", torch.zeros(3))

        def forward(self, x):
            y = self.acc * 2
            self.acc.copy_(x)
            return y + self.acc

    prog = tp.compile(CopyIn(), (torch.randn(3),), **ALIAS_ONLY)
    acc = prog.alias.state_of["b_acc"]
    # the new state *is* the user's input: it cannot move into the state storage
    assert storage(prog, "x") != acc
    assert prog.alias.write_back == (("x", acc),)
    assert prog.plan.storages[acc].kind == "state"


class TwoConds(torch.nn.Module):
    def forward(self, x, p):
        a = torch.cond(p.sum() > 0, lambda t: t.sin() + 1, lambda t: t.cos() - 1, (x,))
        b = torch.cond(p.sum() < 0, lambda t: t * 3, lambda t: t.exp(), (x,))
        return a + b, a * b


def test_outputs_of_consecutive_conds_do_not_overlap():
    prog = tp.compile(TwoConds(), (torch.randn(16, 4), torch.randn(2)), **ALIAS_ONLY)
    first = prog.plan.storages[prog.specs["getitem"].storage]
    second = prog.plan.storages[prog.specs["getitem_1"].storage]
    assert first.id != second.id
    assert first.offset + first.size <= second.offset or second.offset + second.size <= first.offset
    assert len(prog.plan.regions) == 2
    # the first cond's branches hold two 256 B temporaries at once (sin, then + 1); the second's one
    assert [(r.node, r.size) for r in prog.plan.regions] == [("cond", 512), ("cond_1", 256)]
    prog.plan.verify()


def test_an_expand_does_not_grow_its_base_storage():
    # a view addresses no byte its base does not: (3, 1) -> (64, 3, 64) costs nothing
    prog = compiled(lambda t: (t + 1).expand(64, 3, 64), torch.randn(3, 1))
    (storage,) = [s for s in prog.alias.storages.values() if "expand" in s.values]
    assert storage.values == ("add", "expand") and storage.nbytes == 3 * 4
    assert prog.specs["expand"].nbytes == 64 * 3 * 64 * 4
    x = torch.randn(3, 1)
    torch.testing.assert_close(prog.run(x), (x + 1).expand(64, 3, 64))
