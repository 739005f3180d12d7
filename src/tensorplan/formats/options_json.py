"""``tp.CompileOptions`` as JSON, both ways: the plan document and the program file keep the
options a compile ran with under ``"options"``; a document without them (written before they
were kept) reads as the defaults.

>>> from tensorplan.options import CompileOptions
>>> from tensorplan.banks.choice import Bank
>>> options = CompileOptions.of(patches=(2, 2), banks=[Bank("sram", 1024)], pin={"x": "sram"})
>>> decode_options(encode_options(options), "plan.json") == options
True
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tensorplan.banks.choice import Bank, BankOptions
from tensorplan.errors import FormatError
from tensorplan.options import CompileOptions
from tensorplan.plan.plan import PlanOptions
from tensorplan.plan.planners import PlannerParams
from tensorplan.rewrite.options import RewriteOptions
from tensorplan.schedule.schedule import ScheduleOptions

OPTIONS_KEY = "options"  # where a plan document keeps them


def encode_options(options: CompileOptions) -> dict[str, Any]:
    """The options as a JSON-ready dict: one object per group, its fields by name."""
    return json.loads(json.dumps(dataclasses.asdict(options)))


def decode_options(data: Any, where: str) -> CompileOptions:
    """The options ``encode_options`` wrote; a group that is no object, or a field missing
    or unknown, raises ``FormatError`` naming ``where`` (field values are not type-checked:
    the plan the file holds is verified on its own)."""
    try:
        groups = dict(data)
        plan = dict(groups["plan"])
        banks = dict(groups["banks"])
        rewrite = dict(groups["rewrite"])
        params = _tuples(plan.pop("params"))
        listed = banks.pop("banks")
        return CompileOptions(
            RewriteOptions(**_tuples(rewrite)),
            ScheduleOptions(**groups["schedule"]),
            BankOptions(None if listed is None else tuple(Bank(**b) for b in listed),
                        **_tuples(banks)),
            PlanOptions(**plan, params=PlannerParams(**params)))
    except (KeyError, TypeError, ValueError) as error:
        raise FormatError(f"{where}: {OPTIONS_KEY}: not the compile options this tensorplan "
                          f"writes ({type(error).__name__}: {error}); re-save the program"
                          ) from error


def _tuples(fields: Any) -> dict[str, Any]:
    """A group's fields with JSON's lists made tuples again (grids, pins, name lists)."""
    return {key: _tuple(value) for key, value in dict(fields).items()}


def _tuple(value: Any) -> Any:
    return tuple(_tuple(item) for item in value) if isinstance(value, list) else value
