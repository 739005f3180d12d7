"""Argument lists resolved once: node references become slots read from the environment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch.fx

Env = list[Any]


class Slot:
    """A reference to the value of one node in the environment list."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def _has_slot(value: Any) -> bool:
    if isinstance(value, Slot):
        return True
    if isinstance(value, (list, tuple)):
        return any(_has_slot(v) for v in value)
    return False


def _resolve(value: Any, env: Env) -> Any:
    if isinstance(value, Slot):
        return env[value.index]
    if isinstance(value, (list, tuple)):
        return type(value)(_resolve(v, env) for v in value)
    return value


def compile_args(args: tuple[Any, ...], kwargs: Mapping[str, Any],
                 slots: Mapping[torch.fx.Node, int]) -> Callable[[Env], tuple[list, dict]]:
    """A function from the environment to ``(args, kwargs)`` with node values filled in.

    Constant arguments are captured once; only the ones that reference nodes are resolved per
    call (a plain node reference is one list lookup).
    """
    args_t = torch.fx.node.map_arg(args, lambda n: Slot(slots[n]))
    kwargs_t = torch.fx.node.map_arg(dict(kwargs), lambda n: Slot(slots[n]))
    direct = [(i, a.index) for i, a in enumerate(args_t) if isinstance(a, Slot)]
    nested = [(i, a) for i, a in enumerate(args_t) if not isinstance(a, Slot) and _has_slot(a)]
    dynamic_kwargs = [(k, v) for k, v in kwargs_t.items() if _has_slot(v)]
    base_args, base_kwargs = list(args_t), dict(kwargs_t)

    def build(env: Env) -> tuple[list, dict]:
        call_args = base_args.copy()
        for i, index in direct:
            call_args[i] = env[index]
        for i, template in nested:
            call_args[i] = _resolve(template, env)
        call_kwargs = base_kwargs.copy()
        for k, template in dynamic_kwargs:
            call_kwargs[k] = _resolve(template, env)
        return call_args, call_kwargs

    return build
