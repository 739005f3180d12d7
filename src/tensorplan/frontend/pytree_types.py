"""The container types a ``.pt2`` archive's input and output structure names, made known to
torch's pytree before ``torch.export.load`` rebuilds that structure.

torch.export.save writes a program's inputs and outputs as treespecs naming each container
type by its serialized name (a ``transformers`` model's output dataclass is
``transformers.modeling_outputs.CausalLMOutputWithCrossAttentions``). torch.export.load
rebuilds only types registered with the pytree in the loading process, and a package
registers its types when the module defining them is imported: in a fresh process the load
fails (torch logs the cause, ``Deserializing ... in pytree is not registered``, and raises
"check the warnings above").

``register_named_types`` imports the module of each unregistered name, and only when the
name's top-level package is an installed distribution (``importlib.metadata``): the archive
chooses among the modules installed packages ship, never a file to run (a module beside the
archive or in the working directory is not imported).

>>> sorted(spec_types('[1, {"type": "builtins.tuple", "context": "null", "children_spec": '
...                   '[{"type": null, "context": null, "children_spec": []}]}]'))
['builtins.tuple']
"""

from __future__ import annotations

import importlib
import importlib.metadata
import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE

from tensorplan.errors import FormatError

_NAMEDTUPLE = "collections.namedtuple"  # its context is the tuple type's serialized name


def register_named_types(data: bytes, where: str) -> None:
    """Make every container type the archive's treespecs name known to torch's pytree,
    importing the installed module that defines it; ``FormatError`` naming the type and what
    to import or install when one stays unknown."""
    for name in sorted(archive_types(data, where) - SERIALIZED_TYPE_TO_PYTHON_TYPE.keys()):
        problem = _import_defining_module(name)
        if name not in SERIALIZED_TYPE_TO_PYTHON_TYPE:
            raise FormatError(
                f"{where}: the program's inputs or outputs hold a {name}, a container type "
                f"torch's pytree does not know in this process ({problem}); import the "
                "module that registers it (torch.utils._pytree.register_pytree_node) before "
                "loading, or save a model that returns plain tuples of tensors")


def archive_types(data: bytes, where: str) -> set[str]:
    """The serialized type names in the input and output treespecs of every program of a
    ``torch.export.save`` archive (its ``models/*.json``); ``FormatError`` naming ``where``
    when one of those is not a serialized program."""
    names: set[str] = set()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.namelist():
            relative = member.partition("/")[2]
            if relative.startswith("models/") and relative.endswith(".json"):
                try:
                    names |= _program_types(archive.read(member))
                except (ValueError, KeyError, TypeError, AttributeError) as error:
                    raise FormatError(f"{where}: {relative} is not a serialized torch.export "
                                      f"program ({type(error).__name__}: {error})") from error
    return names


def _program_types(raw: bytes) -> set[str]:
    """The type names of the treespecs in one serialized program's module call graph."""
    names: set[str] = set()
    for call in json.loads(raw)["graph_module"]["module_call_graph"]:
        signature = call.get("signature") or {}
        for key in ("in_spec", "out_spec"):
            if isinstance(signature.get(key), str):
                names |= set(spec_types(signature[key]))
    return names


def spec_types(serialized: str) -> Iterator[str]:
    """The type names in one treespec as ``torch.utils._pytree.treespec_dumps`` writes it
    (``ValueError`` when it is not JSON)."""
    _, root = json.loads(serialized)
    yield from _node_types(root)


def _node_types(node: Any) -> Iterator[str]:
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if isinstance(kind, str):
        yield kind
        if kind == _NAMEDTUPLE and isinstance(node.get("context"), str):
            yield node["context"]
    for child in node.get("children_spec") or ():
        yield from _node_types(child)


def _import_defining_module(name: str) -> str:
    """Import the longest dotted prefix of ``name`` that is a module of an installed
    distribution; what was done, or why nothing was, in words for an error message."""
    parts = name.split(".")
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        return "the name is no module path"
    if parts[0] not in importlib.metadata.packages_distributions():
        return f"{parts[0]!r} is not an installed package: install it"
    for end in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:end])
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is None or not (module + ".").startswith(error.name + "."):
                return f"importing {module} failed: {error}"
            continue
        except Exception as error:  # a module's own code raises anything
            return f"importing {module} failed ({type(error).__name__}: {error})"
        return f"importing {module} did not register it"
    return f"no module of {parts[0]!r} defines it"
