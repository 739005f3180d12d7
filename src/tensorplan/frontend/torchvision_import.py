"""``torchvision`` importable beside a CPU-only torch, by whoever imports it first.

PyPI's ``torchvision==0.28.0`` is built against the CUDA torch; beside the CPU torch its C
extension does not load, and ``torchvision/_meta_registrations.py`` then fails registering fake
kernels for ``torchvision::nms`` and ``torchvision::qnms`` (the only ones it registers without
checking that the extension loaded): ``RuntimeError: operator torchvision::nms does not exist``.
``timm`` and ``transformers`` import torchvision, so a user's model file fails the same way
(transformers turns it into a misleading ``ModuleNotFoundError``).

:func:`import_torchvision` imports it and, only when that error is raised, defines those two
schemas (no kernel: calling them still fails; the models never do), drops the half-imported
modules and imports again. :func:`install` (run by ``import tensorplan``) puts an import hook
first on ``sys.meta_path`` that does the same for the first plain ``import torchvision`` from
anywhere (its loader runs again after defining them), then removes itself; it imports nothing
until then (``importlib.util.find_spec`` included).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

_MISSING_OPS = ("nms", "qnms")
_stand_ins: list[Any] = []  # the torch.library.Library defining them, kept alive


def import_torchvision() -> ModuleType:
    """``torchvision``, imported so that its pure-Python models work beside a CPU-only torch
    (see the module docstring). Any other import error is raised as it is."""
    _uninstall()
    try:
        import torchvision
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
        _define_missing_ops()
        for module in [m for m in sys.modules if m.partition(".")[0] == "torchvision"]:
            del sys.modules[module]
        import torchvision
    return torchvision


def _define_missing_ops() -> None:
    """Define the schemas of ``_MISSING_OPS`` in the ``torchvision`` namespace, once."""
    if _stand_ins:
        return
    import torch

    library = torch.library.Library("torchvision", "DEF")
    for op in _MISSING_OPS:
        library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _stand_ins.append(library)


class _Retrying(importlib.abc.Loader):
    """torchvision's own loader, run again once the missing schemas are defined when its
    first run fails on them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # resource readers and the like: the inner's
        return getattr(self.inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        _uninstall()
        try:
            self.inner.exec_module(module)
        except RuntimeError as error:
            if "torchvision::nms" not in str(error):
                raise
            _define_missing_ops()
            for name in [m for m in sys.modules if m.startswith("torchvision.")]:
                del sys.modules[name]
            self.inner.exec_module(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Finds ``torchvision`` as the path does, with :class:`_Retrying` as its loader (a
    ``find_spec`` alone imports nothing)."""

    def find_spec(self, name: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torchvision":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Retrying(spec.loader)
        return spec


_HOOK = _Hook()


def install() -> None:
    """Make the first ``import torchvision`` go through :func:`import_torchvision` (nothing
    when it is imported already, or not installed)."""
    if "torchvision" in sys.modules or _HOOK in sys.meta_path:
        return
    sys.meta_path.insert(0, _HOOK)


def _uninstall() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
