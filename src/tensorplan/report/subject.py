"""What a page or a picture shows a plan of: a model (its figures at the sizes asked for, its
values, the rewrites it went through) or a DSA instance (its buffers, no model's fields)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from tensorplan.plan.peak import peak
from tensorplan.plan.plan import MemoryPlan
from tensorplan.program import Program
from tensorplan.report.figures import plan_numbers
from tensorplan.report.rewrites import Note, rewrite_notes
from tensorplan.report.text import bytes_text

Figures = tuple[tuple[str, str], ...]  # (glossary term, text) rows of a summary


@dataclass(frozen=True)
class Subject:
    """A plan's subject, beside the plan itself."""

    name: str                  # the model's name, or the instance file's base name
    figures: Figures = ()      # the summary's rows, each label a glossary term
    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # value name ->
    #                            what the page says of it (``html.value_details``)
    notes: tuple[Note, ...] = ()  # the rewrites the program went through (patched, chunked)
    at: Mapping[str, int] = field(default_factory=dict)  # sizes of the dynamic dims shown
    placeholders: int = 0      # top-level steps that only bind inputs, weights and buffers
    instance: bool = False     # a DSA instance: buffers, no kinds, graphs or constants

    @property
    def title(self) -> str:
        """The page's heading: ``tiny_gpt: memory plan``, ``challenging_A.csv: placement``."""
        return f"{self.name}: {'placement' if self.instance else 'memory plan'}"


def model_figures(program: Program, at: Mapping[str, int] | None = None) -> Figures:
    """``plan_numbers`` at the sizes ``at`` and the peak step there; with dynamic dims, the
    arena at the upper bounds second."""
    plan = program.plan
    shown = plan.at(**at) if at else plan
    rows = [*plan_numbers(plan, at), ("peak step", str(peak(shown).step))]
    if plan.symbolic is not None:
        rows.insert(1, ("arena at the upper bounds", bytes_text(plan.arena_bytes_at())))
    return tuple(rows)


def model_subject(program: Program, name: str, values: Mapping[str, Mapping[str, Any]],
                  at: Mapping[str, int] | None = None) -> Subject:
    """A compiled program as a page's or picture's subject, at the sizes ``at``."""
    graph = program.exported_program.graph
    return Subject(name, model_figures(program, at), values, tuple(rewrite_notes(program)),
                   dict(at or {}), sum(node.op == "placeholder" for node in graph.nodes))


def instance_subject(path: str, figures: Sequence[tuple[str, str]],
                     plan: MemoryPlan) -> Subject:
    """A DSA instance's placement (``plan``, see ``html.placement_plan``) as a subject: the
    file's base name, its figures and the peak step."""
    return Subject(PurePath(path).name, (*figures, ("peak step", str(peak(plan).step))),
                   instance=True)
