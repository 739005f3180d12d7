"""Program files: save and load without re-planning, and every way a file can be wrong."""

from __future__ import annotations

import builtins
import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from shared_models import Branches, Chain

import tensorplan as tp
from tensorplan import zoo
from tensorplan.formats.artifact import (
    MANIFEST,
    PLAN_MEMBER,
    PROGRAM_MEMBER,
    ArtifactParts,
    is_artifact,
    read_artifact,
    write_artifact,
)
from tensorplan.report import plan_to_json

SPEC_FIELDS = ("shape", "dtype", "dim_order", "strides", "nbytes", "const", "storage")




def _example(name: str) -> zoo.Example:
    if name == "branches":
        return zoo.Example(Branches(), (torch.randn(8, 8), torch.randn(1)))
    return zoo.example(name)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[tp.Program, Path]:
    # one storage per value, so the edits below have several storages to break
    program = tp.compile(Chain(), (torch.randn(4),), reuse=False, reorder=False, fold=False)
    path = tmp_path_factory.mktemp("saved") / "chain.tpz"
    program.save(path)
    return program, path


def _assert_same_program(loaded: tp.Program, program: tp.Program) -> None:
    for field in dataclasses.fields(tp.MemoryPlan):
        assert getattr(loaded.plan, field.name) == getattr(program.plan, field.name), field.name
    derived = dict(loaded.specs.tensors())
    for name, spec in program.specs.tensors():
        for field in SPEC_FIELDS:
            assert getattr(derived[name], field) == getattr(spec, field), (name, field)
        assert [str(s) for s in derived[name].sym_shape] == [str(s) for s in spec.sym_shape]
    assert set(loaded.alias.storages) == set(program.alias.storages)


@pytest.mark.parametrize("name", ["mlp", "convnet", "kv_cache", "tiny_gpt", "branches"])
def test_round_trip_keeps_the_plan_and_the_specs_and_runs_identically(name, tmp_path):
    e = _example(name)
    program = tp.compile(e.model, e.args, e.kwargs, dynamic_shapes=e.dynamic_shapes)
    program.save(tmp_path / "m.tpz")
    loaded = tp.load(tmp_path / "m.tpz")
    _assert_same_program(loaded, program)
    torch.testing.assert_close(loaded.run(*e.args, **e.kwargs),
                               program.run(*e.args, **e.kwargs), rtol=0, atol=0)


def _conv_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, stride=2)).eval()


@pytest.mark.parametrize("most", [16, 64])
def test_a_conv_with_a_dynamic_batch_loads_with_the_batch_bound_it_was_saved_with(most,
                                                                                  tmp_path):
    # re-traced in the loaded program's fresh fake mode, conv's mkldnn choice guarded the
    # batch below 16 (the specs said 15) until the re-trace used export's backends
    model = _conv_net()
    batch = torch.export.Dim("batch", min=1, max=most)
    program = tp.compile(model, (torch.randn(4, 3, 16, 16),), dynamic_shapes=({0: batch},))
    program.save(tmp_path / "conv.tplan")
    loaded = tp.load(tmp_path / "conv.tplan")
    _assert_same_program(loaded, program)
    assert loaded.specs["input"].shape[0] == most
    for size in (1, 5, most):
        x = torch.randn(size, 3, 16, 16)
        torch.testing.assert_close(loaded.run(x), model(x))


def test_a_torch_loaded_conv_program_propagates_to_the_saved_bounds(tmp_path):
    model = _conv_net()
    batch = torch.export.Dim("batch", min=1, max=16)
    exported = tp.capture(model, (torch.randn(4, 3, 16, 16),), dynamic_shapes=({0: batch},))
    torch.export.save(exported, tmp_path / "conv.pt2")
    reloaded = torch.export.load(tmp_path / "conv.pt2")
    shapes = {name: spec.shape for name, spec in tp.propagate(exported).tensors()}
    reloaded_shapes = dict(tp.propagate(reloaded).tensors())  # with getitems of unused outputs
    assert {name: reloaded_shapes[name].shape for name in shapes} == shapes
    assert shapes["input"][0] == 16


# Loads a GPT-2 program file in a process that has not imported transformers, runs it on the
# saved tokens, and writes the plan document and the logits.
_LOAD_IN_A_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import torch
    import tensorplan as tp
    from tensorplan.report import plan_to_json
    folder = sys.argv[1]
    assert "transformers.modeling_outputs" not in sys.modules
    loaded = tp.load(folder + "/gpt2.tplan")
    tokens = torch.load(folder + "/tokens.pt", weights_only=True)
    outputs = [loaded.run(t) for t in tokens]
    torch.save([type(o).__name__ for o in outputs], folder + "/types.pt")
    torch.save([o.logits for o in outputs], folder + "/logits.pt")
    with open(folder + "/plan.json", "w") as file:
        json.dump(plan_to_json(loaded), file)
""")


@pytest.mark.slow
def test_a_transformers_program_loads_in_a_fresh_process(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500,
                                     n_positions=128, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()  # returns its output dataclass
    seq = torch.export.Dim("seq", min=2, max=32)
    program = tp.compile(model, (torch.randint(0, 500, (1, 16)),), dynamic_shapes=({1: seq},))
    program.save(tmp_path / "gpt2.tplan")
    tokens = [torch.randint(0, 500, (1, n)) for n in (2, 7, 32)]
    torch.save(tokens, tmp_path / "tokens.pt")
    done = subprocess.run([sys.executable, "-c", _LOAD_IN_A_FRESH_PROCESS, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded_here = tp.load(tmp_path / "gpt2.tplan")  # transformers is imported in this process
    _assert_same_program(loaded_here, program)
    with open(tmp_path / "plan.json") as file:
        assert json.load(file) == json.loads(json.dumps(plan_to_json(loaded_here)))
    assert torch.load(tmp_path / "types.pt") == ["CausalLMOutputWithCrossAttentions"] * 3
    for t, logits in zip(tokens, torch.load(tmp_path / "logits.pt"), strict=True):
        torch.testing.assert_close(logits, model(t).logits)


def test_a_program_of_an_unknown_container_type_names_it_and_what_to_import(tmp_path):
    exported = torch.export.export(Chain(), (torch.randn(4),))
    torch.export.save(exported, tmp_path / "chain.pt2")
    with zipfile.ZipFile(tmp_path / "chain.pt2") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    model_json = next(name for name in members if name.endswith("models/model.json"))
    members[model_json] = members[model_json].replace(
        b'\\"builtins.tuple\\"', b'\\"nosuchpackage.outputs.Output\\"', 1)
    with zipfile.ZipFile(tmp_path / "unknown.pt2", "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(tp.TensorPlanError, match="nosuchpackage.outputs.Output.*'nosuchpackage' "
                                                 "is not an installed package.*import the module"):
        tp.capture(str(tmp_path / "unknown.pt2"))
    assert "nosuchpackage" not in sys.modules


def test_a_loaded_program_saves_and_loads_again(saved, tmp_path):
    program, path = saved
    tp.load(path).save(tmp_path / "again.tpz")
    _assert_same_program(tp.load(tmp_path / "again.tpz"), program)


def test_write_and_read_artifact_pass_the_parts_without_a_program(saved, tmp_path):
    program, _ = saved
    write_artifact(tmp_path / "parts.tpz", program.exported_program, program.specs,
                   program.document())
    parts = read_artifact(tmp_path / "parts.tpz")
    assert isinstance(parts, ArtifactParts)
    assert parts.plan == program.plan
    assert parts.options == program.options
    assert dict(parts.specs.tensors()).keys() == dict(program.specs.tensors()).keys()
    assert parts.schedule.alias.storage_of == program.alias.storage_of
    assert parts.schedule.order == program.schedule.order
    assert parts.roles == program.roles


def test_the_file_is_a_zip_of_manifest_plan_and_program(saved):
    program, path = saved
    with zipfile.ZipFile(path) as archive:
        assert sorted(archive.namelist()) == sorted([MANIFEST, PLAN_MEMBER, PROGRAM_MEMBER])
        manifest = json.loads(archive.read(MANIFEST))
        plan = json.loads(archive.read(PLAN_MEMBER))
    assert (manifest["format"], manifest["version"]) == ("tensorplan.program", 1)
    assert plan == json.loads(json.dumps(plan_to_json(program)))
    assert plan["arena_bytes"] == program.plan.arena_bytes == 32
    assert not list(path.parent.glob("*.partial"))


def test_is_artifact_tells_program_files_from_other_files(saved, tmp_path):
    plain = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(Chain(), (torch.randn(4),)), plain)
    (tmp_path / "noise").write_bytes(os.urandom(64))
    assert is_artifact(saved[1])
    assert not is_artifact(plain)
    assert not is_artifact(tmp_path / "noise")
    assert not is_artifact(tmp_path / "missing")


def _rewrite(source: Path, target: Path, edit_plan=None, edit_manifest=None) -> Path:
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    for member, edit in ((PLAN_MEMBER, edit_plan), (MANIFEST, edit_manifest)):
        if edit is not None:
            document = json.loads(members[member])
            edit(document)
            members[member] = json.dumps(document).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


def _storage(document: dict, value: str) -> dict:
    return next(s for s in document["storages"] if value in s["values"])


def test_truncated_file(saved, tmp_path):
    data = saved[1].read_bytes()
    bad = tmp_path / "truncated.tpz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(tp.FormatError, match=f"{bad}: not a readable zip archive.*truncated"):
        tp.load(bad)


def test_random_bytes(tmp_path):
    bad = tmp_path / "noise.tpz"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(tp.FormatError, match=f"{bad}: not a readable zip archive"):
        tp.load(bad)


def test_corrupted_member_fails_its_checksum(saved, tmp_path):
    data = bytearray(saved[1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "corrupt.tpz"
    bad.write_bytes(bytes(data))
    with pytest.raises(tp.FormatError, match=f"{bad}: "):
        tp.load(bad)


def test_missing_file(tmp_path):
    with pytest.raises(tp.FormatError, match="missing.tpz: cannot read the file"):
        tp.load(tmp_path / "missing.tpz")


def test_zip_without_manifest(tmp_path):
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(tp.FormatError, match=f"{foreign}: not a tensorplan program file"):
        tp.load(foreign)


def test_plain_torch_export_file_is_not_a_program_file(tmp_path):
    plain = tmp_path / "plain.pt2"
    torch.export.save(torch.export.export(Chain(), (torch.randn(4),)), plain)
    with pytest.raises(tp.FormatError, match=r"no tensorplan.json.*tp.compile\(path\)"):
        tp.load(plain)


def test_future_version(saved, tmp_path):
    bad = _rewrite(saved[1], tmp_path / "future.tpz",
                   edit_manifest=lambda m: m.update(version=2))
    with pytest.raises(tp.FormatError, match="version 2 was written by a newer tensorplan"):
        tp.load(bad)


def test_future_plan_schema(saved, tmp_path):
    bad = _rewrite(saved[1], tmp_path / "future.tpz", edit_plan=lambda p: p.update(version=7))
    with pytest.raises(tp.FormatError, match=r"plan.json: version 7 was written by a newer"):
        tp.load(bad)


def test_foreign_format_name(saved, tmp_path):
    bad = _rewrite(saved[1], tmp_path / "other.tpz",
                   edit_manifest=lambda m: m.update(format="something.else"))
    with pytest.raises(tp.FormatError, match="format is 'something.else'"):
        tp.load(bad)


def test_overlapping_offset(saved, tmp_path):
    def overlap(document):
        _storage(document, "relu")["offset"] = _storage(document, "x")["offset"]

    bad = _rewrite(saved[1], tmp_path / "overlap.tpz", edit_plan=overlap)
    with pytest.raises(tp.FormatError, match="the saved plan is invalid.*overlaps"):
        tp.load(bad)


def test_overlap_hidden_by_edited_lifetimes_is_caught_on_the_real_schedule(saved, tmp_path):
    # x [0, 2) and relu [1, 3) are live together; the file claims relu starts at 2 so that
    # both can sit at offset 0, which its own verify() accepts.
    def hide(document):
        x, relu, neg = (_storage(document, v) for v in ("x", "relu", "neg"))
        x["offset"], relu["offset"], neg["offset"] = 0, 0, 16
        relu["start"] = 2

    bad = _rewrite(saved[1], tmp_path / "hidden.tpz", edit_plan=hide)
    with pytest.raises(tp.FormatError, match="unsafe for the embedded program's schedule"):
        tp.load(bad)


def test_storage_smaller_than_its_values(saved, tmp_path):
    bad = _rewrite(saved[1], tmp_path / "small.tpz",
                   edit_plan=lambda d: _storage(d, "relu").update(size=0))
    with pytest.raises(tp.FormatError, match=r"storage \d+ \(relu\) has 0 bytes but needs 16"):
        tp.load(bad)


def test_value_spec_that_differs_from_the_program(saved, tmp_path):
    def retype(document):
        next(v for v in document["values"] if v["name"] == "neg")["dtype"] = "float16"

    bad = _rewrite(saved[1], tmp_path / "dtype.tpz", edit_plan=retype)
    with pytest.raises(tp.FormatError, match="value 'neg' has dtype 'float16' in the file but "
                                             "'float32' in the embedded program"):
        tp.load(bad)


def test_missing_storage(saved, tmp_path):
    def drop(document):
        document["storages"].remove(_storage(document, "neg"))

    bad = _rewrite(saved[1], tmp_path / "drop.tpz", edit_plan=drop)
    with pytest.raises(tp.FormatError, match=r"places storages \[0, 1\] but the embedded "
                                             r"program has storages \[0, 1, 2\]"):
        tp.load(bad)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["storages"][0].pop("offset"), r"storages\[0\]: missing field 'offset'"),
    (lambda d: d.update(arena_bytes="big"), "field 'arena_bytes' should be int, got 'big'"),
    (lambda d: d.update(optimal=1), "field 'optimal' should be bool, got 1"),
    (lambda d: d["storages"][0].update(kind="scratch"), "unknown storage kind 'scratch'"),
    (lambda d: d.update(alignment=0), "alignment 0 is not a positive number of bytes"),
    (lambda d: d["storages"].append(dict(d["storages"][0])), "the same storage id appears twice"),
    (lambda d: d.update(storages=[3]), r"storages\[0\]: expected a JSON object, got int"),
])
def test_malformed_plan_fields(saved, tmp_path, edit, message):
    bad = _rewrite(saved[1], tmp_path / "malformed.tpz", edit_plan=edit)
    with pytest.raises(tp.FormatError, match=message):
        tp.load(bad)


def test_plan_that_is_not_json(saved, tmp_path):
    with zipfile.ZipFile(saved[1]) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    bad = tmp_path / "text.tpz"
    with zipfile.ZipFile(bad, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, b"{not json" if name == PLAN_MEMBER else data)
    with pytest.raises(tp.FormatError, match="plan.json: not valid JSON"):
        tp.load(bad)


class _Payload:
    """Unpickling this runs code: what a hostile file would embed."""

    def __reduce__(self):
        return (exec, ("import builtins; builtins._tensorplan_pwned = True",))


def _with_hostile_member(source: Path, target: Path, member: str, config: bool) -> Path:
    with zipfile.ZipFile(source) as archive:
        outer = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(io.BytesIO(outer[PROGRAM_MEMBER])) as archive:
        inner = {name: archive.read(name) for name in archive.namelist()}
    root = next(iter(inner)).partition("/")[0]
    payload = io.BytesIO()
    torch.save(_Payload(), payload)
    inner[f"{root}/{member}"] = payload.getvalue()
    if config:  # mark the first weight as a pickled tensor subclass
        name = f"{root}/data/weights/model_weights_config.json"
        document = json.loads(inner[name])
        next(iter(document["config"].values())).update(use_pickle=True, path_name="weight_0")
        inner[name] = json.dumps(document).encode()
    program = io.BytesIO()
    with zipfile.ZipFile(program, "w") as archive:
        for name, data in inner.items():
            archive.writestr(name, data)
    outer[PROGRAM_MEMBER] = program.getvalue()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in outer.items():
            archive.writestr(name, data)
    return target


@pytest.mark.parametrize(("member", "config"), [
    ("data/weights/weight_0", True),
    ("data/sample_inputs/model.pt", False),
    ("data/constants/opaque_obj_0", False),
    ("data/aotinductor/model/model.so", False),
])
def test_pickled_objects_in_the_program_are_refused_unrun(tmp_path, member, config):
    e = zoo.example("mlp")
    tp.compile(e.model, e.args).save(tmp_path / "mlp.tpz")
    bad = _with_hostile_member(tmp_path / "mlp.tpz", tmp_path / "hostile.tpz", member, config)
    with pytest.raises(tp.FormatError, match=f"program.pt2: (data|member '{member}')"):
        tp.load(bad)
    assert not getattr(builtins, "_tensorplan_pwned", False)


def test_a_program_torch_export_cannot_serialize_is_a_format_error(tmp_path):
    class TopK(torch.nn.Module):
        def forward(self, x):
            return torch.topk(x, 2)

    prog = tp.compile(TopK(), (torch.randn(5),))
    with pytest.raises(tp.FormatError, match="torch.export cannot serialize this program .*"
                                             "return a plain tuple of tensors"):
        prog.save(tmp_path / "topk.tplan")
    assert not list(tmp_path.iterdir())  # nothing half-written
