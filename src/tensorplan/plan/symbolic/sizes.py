"""Byte counts as functions of the dynamic dims: a small expression type that Python and a C
compiler both evaluate, and proofs over a box of dim ranges. Torch-free and sympy-free.

A ``Poly`` is a polynomial with integer coefficients in named dims; a ``SizeExpr`` is the
largest of a few polys (sums and maxima of byte counts are closed in this form). A ``Box``
holds each dim's inclusive integer range. ``at_least(p, q, box)`` is a proof, never a
sample: True only when ``p >= q`` at every integer point of the box.

>>> box = Box({"seq": (1, 128)})
>>> a = SizeExpr.of(Poly.dim("seq") * 3072)
>>> b = a.plus(SizeExpr.constant(4096), box).max(SizeExpr.constant(8192), box)
>>> b.text(), b.evaluate({"seq": 1}), b.evaluate({"seq": 64})
('max(3072*seq + 4096, 8192)', 8192, 200704)
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

Monomial = tuple[tuple[str, int], ...]   # sorted (dim, power > 0); () is the constant term

MAX_TERMS = 24          # a SizeExpr with more terms is closed over by one poly above them all
MAX_POINTS = 4096       # a univariate range this small is checked point by point if need be


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for dim, power in b:
        powers[dim] = powers.get(dim, 0) + power
    return tuple(sorted(powers.items()))


def _falling_basis(power: int) -> list[tuple[int, int]]:
    """``x**power`` as ``sum(c * C(x, k))``: the pairs ``(k, c)``, ``c = k! S(power, k)``."""
    row = [1]  # Stirling numbers of the second kind S(n, k), k = 0..n
    for n in range(1, power + 1):
        row = [0] + [k * (row[k] if k < len(row) else 0) + row[k - 1] for k in range(1, n + 1)]
    return [(k, math.factorial(k) * s) for k, s in enumerate(row) if s]


def _times_binomial(poly: Mapping[Monomial, Fraction], dim: str,
                    k: int) -> dict[Monomial, Fraction]:
    """``poly * C(dim, k)`` with rational coefficients."""
    result = dict(poly)
    for j in range(k):
        step: dict[Monomial, Fraction] = {}
        for mono, c in result.items():
            for extra, factor in ((((dim, 1),), Fraction(1, j + 1)), ((), Fraction(-j, j + 1))):
                if factor:
                    key = _mono_mul(mono, extra)
                    step[key] = step.get(key, Fraction(0)) + c * factor
        result = step
    return {m: c for m, c in result.items() if c}


@dataclass(frozen=True)
class Poly:
    """sum(coefficient * product of dim**power), integer coefficients."""

    terms: tuple[tuple[Monomial, int], ...]  # sorted by monomial, no zero coefficient

    @staticmethod
    def _of(table: Mapping[Monomial, int]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in table.items() if c)))

    @staticmethod
    def constant(value: int) -> Poly:
        """The constant ``value``."""
        return Poly._of({(): int(value)})

    @staticmethod
    def dim(name: str) -> Poly:
        """The dim ``name`` itself."""
        return Poly(((((name, 1),), 1),))

    def __add__(self, other: Poly) -> Poly:
        table = dict(self.terms)
        for mono, coef in other.terms:
            table[mono] = table.get(mono, 0) + coef
        return Poly._of(table)

    def __sub__(self, other: Poly) -> Poly:
        return self + other * -1

    def __mul__(self, other: Poly | int) -> Poly:
        if isinstance(other, int):
            return Poly._of({m: c * other for m, c in self.terms})
        table: dict[Monomial, int] = {}
        for (ma, ca), (mb, cb) in itertools.product(self.terms, other.terms):
            mono = _mono_mul(ma, mb)
            table[mono] = table.get(mono, 0) + ca * cb
        return Poly._of(table)

    @property
    def dims(self) -> frozenset[str]:
        """The dims it depends on."""
        return frozenset(d for mono, _ in self.terms for d, _ in mono)

    @property
    def is_constant(self) -> bool:
        """True when it depends on no dim."""
        return all(not mono for mono, _ in self.terms)

    def evaluate(self, values: Mapping[str, int]) -> int:
        """Its value with each dim at ``values[dim]``."""
        return sum(coef * math.prod(values[d] ** p for d, p in mono) for mono, coef in self.terms)

    def substitute(self, replacements: Mapping[str, Poly]) -> Poly:
        """The poly with each dim in ``replacements`` replaced by its poly."""
        result = Poly.constant(0)
        for mono, coef in self.terms:
            product = Poly.constant(coef)
            for dim, power in mono:
                base = replacements.get(dim, Poly.dim(dim))
                for _ in range(power):
                    product = product * base
            result = result + product
        return result

    def shifted(self, lower: Mapping[str, int]) -> Poly:
        """The same function of ``t = dim - lower[dim]``: its coefficients are those of the
        poly in the distances from the box's low corner."""
        return self.substitute({d: Poly.dim(d) + Poly.constant(lo) for d, lo in lower.items()})

    def mirrored(self, upper: Mapping[str, int]) -> Poly:
        """The same function of ``u = upper[dim] - dim`` (its own inverse)."""
        return self.substitute({d: Poly.constant(hi) - Poly.dim(d) for d, hi in upper.items()})

    def binomial(self) -> dict[Monomial, int]:
        """Its coefficients in the basis of products of ``C(dim, k)``: the poly is a multiple
        of ``a`` at every integer point exactly when all of them are."""
        table: dict[Monomial, int] = {}
        for mono, coef in self.terms:
            for picks in itertools.product(*(_falling_basis(power) for _, power in mono)):
                key = tuple((dim, k) for (dim, _), (k, _) in zip(mono, picks, strict=True)
                            if k)
                table[key] = table.get(key, 0) + coef * math.prod(c for _, c in picks)
        return {k: c for k, c in table.items() if c}

    @staticmethod
    def from_binomial(table: Mapping[Monomial, int]) -> Poly | None:
        """The poly with these coefficients in the ``C(dim, k)`` basis (None when its
        coefficients in powers of the dims are not all integers)."""
        result: dict[Monomial, Fraction] = {}
        for key, coef in table.items():
            product = {(): Fraction(coef)}
            for dim, k in key:
                product = _times_binomial(product, dim, k)
            for mono, c in product.items():
                result[mono] = result.get(mono, Fraction(0)) + c
        if any(c.denominator != 1 for c in result.values()):
            return None
        return Poly._of({m: int(c) for m, c in result.items()})

    def aligned_to(self, alignment: int) -> bool:
        """True when every value at integer dims is a multiple of ``alignment``."""
        return all(c % alignment == 0 for c in self.binomial().values())

    def text(self) -> str:
        """Human and Python form, highest degree first, e.g. ``3072*seq + 4096``."""
        if not self.terms:
            return "0"
        parts = []
        for mono, coef in sorted(self.terms, key=lambda t: (-sum(p for _, p in t[0]), t[0])):
            factors = [d if p == 1 else f"{d}**{p}" for d, p in mono]
            if coef != 1 or not factors:
                factors.insert(0, str(abs(coef)) if parts else str(coef))
            body = "*".join(factors)
            if parts:
                parts.append(("- " if coef < 0 else "+ ") + body.lstrip("-"))
            else:
                parts.append(body)
        return " ".join(parts)

    def c_text(self, ctype: str) -> str:
        """C form over variables named like the dims, in ``ctype`` arithmetic."""
        if not self.terms:
            return f"(({ctype})0)"
        parts = []
        for mono, coef in self.terms:
            factors = [f"(({ctype}){coef})"] + [d for d, p in mono for _ in range(p)]
            parts.append("*".join(factors))
        return "(" + " + ".join(parts) + ")"

    def to_json(self) -> list[list]:
        """``[[coefficient, {dim: power}], ...]``."""
        return [[coef, dict(mono)] for mono, coef in self.terms]

    @staticmethod
    def from_json(data: Iterable) -> Poly:
        """The poly ``to_json`` wrote (``ValueError`` for anything else)."""
        table: dict[Monomial, int] = {}
        for coef, powers in data:
            if not isinstance(coef, int) or not isinstance(powers, dict) or not all(
                    isinstance(d, str) and isinstance(p, int) and p > 0
                    for d, p in powers.items()):
                raise ValueError(f"not a poly term: {[coef, powers]!r}")
            mono = tuple(sorted(powers.items()))
            table[mono] = table.get(mono, 0) + coef
        return Poly._of(table)


@dataclass(frozen=True)
class Box:
    """Each dim's inclusive integer range ``(lower, upper)``."""

    ranges: Mapping[str, tuple[int, int]]

    @property
    def lower(self) -> dict[str, int]:
        """The low corner."""
        return {d: lo for d, (lo, _) in self.ranges.items()}

    @property
    def upper(self) -> dict[str, int]:
        """The high corner."""
        return {d: hi for d, (_, hi) in self.ranges.items()}

    def corners(self, dims: Iterable[str]) -> list[dict[str, int]]:
        """Every vertex of the box over ``dims`` (the other dims at their low end)."""
        dims = sorted(dims)
        base = self.lower
        return [{**base, **dict(zip(dims, pick, strict=True))}
                for pick in itertools.product(*(self.ranges[d] for d in dims))]


def aligned_cover(poly: Poly, upper: Mapping[str, int], alignment: int) -> Poly | None:
    """An aligned poly at least ``poly`` wherever every dim is at most ``upper`` and equal
    to ``poly`` rounded up to the alignment at ``upper``: in ``u = upper - dim`` every
    coefficient in the ``C(u, k)`` basis is rounded up to a multiple of ``alignment`` (each
    ``C(u, k)`` is >= 0 there). None when its powers' coefficients would not be integers.

    >>> aligned_cover(Poly.dim("s") * Poly.dim("s") * 8, {"s": 128}, 16).text()
    '8*s**2 - 8*s + 1024'
    """
    table = poly.mirrored(upper).binomial()
    rounded = {key: -(-c // alignment) * alignment for key, c in table.items()}
    rounded[()] = -(-table.get((), 0) // alignment) * alignment
    mirrored = Poly.from_binomial(rounded)
    return None if mirrored is None else mirrored.mirrored(upper)


def _univariate_min(p: Poly, dim: str, box: Box) -> int | None:
    """The least value of a poly in one dim over its range, exactly (None: not worked out)."""
    lo, hi = box.ranges[dim]
    degree = max((pw for mono, _ in p.terms for _, pw in mono), default=0)
    points = {lo, hi}
    if degree == 2:
        a = sum(c for m, c in p.terms if m == ((dim, 2),))
        b = sum(c for m, c in p.terms if m == ((dim, 1),))
        vertex = -b / (2 * a)
        points |= {min(max(math.floor(vertex), lo), hi), min(max(math.ceil(vertex), lo), hi)}
    elif degree > 2:
        if hi - lo > MAX_POINTS:
            return None
        points = set(range(lo, hi + 1))
    return min(p.evaluate({dim: x}) for x in points)


def at_least(p: Poly, q: Poly, box: Box) -> bool:
    """Proof that ``p >= q`` at every integer point of ``box``: the difference has no negative
    coefficient in the distances from the low corner, or its least value is worked out
    exactly (multilinear: at a vertex; one dim: at the ends or the vertex of a parabola).
    False means not proven, not refuted."""
    diff = p - q
    if all(coef >= 0 for _, coef in diff.shifted(box.lower).terms):
        return True
    dims = diff.dims
    if all(power == 1 for mono, _ in diff.terms for _, power in mono) and len(dims) <= 6:
        return all(diff.evaluate(corner) >= 0 for corner in box.corners(dims))
    if len(dims) == 1:
        least = _univariate_min(diff, next(iter(dims)), box)
        return least is not None and least >= 0
    return False


Atom = tuple[Poly, int]  # (p, k): p rounded up to a multiple of k


def _atom_key(atom: Atom) -> tuple:
    return atom[0].terms, atom[1]


def _ceil(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Term:
    """``poly + sum(align(p, k) for p, k in atoms)``: a sum of byte counts, those that are
    not multiples of the alignment at every size each rounded up on its own."""

    poly: Poly
    atoms: tuple[Atom, ...] = ()  # sorted

    @staticmethod
    def aligned(poly: Poly, alignment: int) -> Term:
        """``align(poly, alignment)``: the poly itself when all its values are multiples."""
        if poly.is_constant:
            return Term(Poly.constant(_ceil(poly.evaluate({}), alignment)))
        if poly.aligned_to(alignment):
            return Term(poly)
        return Term(Poly.constant(0), ((poly, alignment),))

    def __add__(self, other: Term) -> Term:
        return Term(self.poly + other.poly,
                    tuple(sorted(self.atoms + other.atoms, key=_atom_key)))

    def evaluate(self, values: Mapping[str, int]) -> int:
        """Its value with each dim at ``values[dim]``."""
        return self.poly.evaluate(values) + sum(_ceil(a.evaluate(values), k)
                                                for a, k in self.atoms)

    def below(self) -> Poly:
        """A poly never above it (each rounding dropped)."""
        return sum((a for a, _ in self.atoms), self.poly)

    def above(self) -> Poly:
        """A poly never below it (each rounding taken at its most, ``k - 1``)."""
        return sum((a + Poly.constant(k - 1) for a, k in self.atoms), self.poly)

    @property
    def dims(self) -> frozenset[str]:
        """The dims it depends on."""
        return self.poly.dims.union(*(a.dims for a, _ in self.atoms))

    def aligned_to(self, alignment: int) -> bool:
        """True when every value it takes is a multiple of ``alignment``."""
        return self.poly.aligned_to(alignment) and all(k % alignment == 0 for _, k in self.atoms)

    def text(self) -> str:
        """Python form, ``align(p, k)`` for a rounding."""
        parts = [f"align({a.text()}, {k})" for a, k in self.atoms]
        if self.poly.terms or not parts:
            parts.insert(0, self.poly.text())
        return " + ".join(parts)

    def c_text(self, ctype: str, align: str) -> str:
        """C form, calling the two-argument rounding function named ``align``."""
        parts = [f"{align}({a.c_text(ctype)}, (({ctype}){k}))" for a, k in self.atoms]
        if self.poly.terms or not parts:
            parts.insert(0, self.poly.c_text(ctype))
        return "(" + " + ".join(parts) + ")"

    def to_json(self) -> dict[str, Any]:
        """``{"poly": Poly.to_json(), "aligned": [[poly, k], ...]}``."""
        return {"poly": self.poly.to_json(), "aligned": [[a.to_json(), k] for a, k in self.atoms]}

    @staticmethod
    def from_json(data: Any) -> Term:
        """The term ``to_json`` wrote (``ValueError`` for anything else)."""
        if not isinstance(data, dict) or set(data) != {"poly", "aligned"}:
            raise ValueError(f"not a term: {data!r}")
        atoms = []
        for item in data["aligned"]:
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], int) \
                    or item[1] < 1:
                raise ValueError(f"not a rounding: {item!r}")
            atoms.append((Poly.from_json(item[0]), item[1]))
        return Term(Poly.from_json(data["poly"]), tuple(sorted(atoms, key=_atom_key)))


def term_at_least(x: Term, y: Term, box: Box) -> bool:
    """Proof that ``x >= y`` at every integer point of the box: the roundings they share
    cancel, x's others are dropped, y's others are taken at their most. Each pair is proven
    once per box (a chunked program compares the same sizes once per chunk)."""
    return _term_at_least(x, y, tuple(sorted(box.ranges.items())))


@functools.lru_cache(maxsize=1 << 16)
def _term_at_least(x: Term, y: Term, ranges: tuple[tuple[str, tuple[int, int]], ...]) -> bool:
    box = Box(dict(ranges))
    shared = Counter(x.atoms) & Counter(y.atoms)
    rest_x = Term(x.poly, tuple((Counter(x.atoms) - shared).elements()))
    rest_y = Term(y.poly, tuple((Counter(y.atoms) - shared).elements()))
    return at_least(rest_x.below(), rest_y.above(), box)


def _envelope(terms: Iterable[Term], box: Box) -> Term:
    """One aligned term at least every one of ``terms`` over the box: each rounding replaced
    by its ``aligned_cover``, then the largest coefficient of each ``C(dim - lower, k)``."""
    lower, tables = box.lower, []
    for term in terms:
        poly = term.poly
        for atom, k in term.atoms:
            cover = aligned_cover(atom, box.upper, k)
            poly = poly + (cover if cover is not None else
                           Poly.constant(_ceil(max(atom.evaluate(c) for c in
                                                   box.corners(atom.dims)), k)))
        tables.append(poly.shifted(lower).binomial())
    keys = set().union(*tables)
    table = {key: max(t.get(key, 0) for t in tables) for key in keys}
    shifted = Poly.from_binomial({k: c if k else c for k, c in table.items()})
    assert shifted is not None  # products of C(x, k) with integer coefficients
    return Term(shifted.shifted({d: -lo for d, lo in lower.items()}))


@dataclass(frozen=True)
class SizeExpr:
    """The largest of its terms: a byte count (an offset, a size, an arena) in the dims."""

    terms: tuple[Term, ...]  # at least one; none proven below another

    @staticmethod
    def constant(value: int) -> SizeExpr:
        """The constant ``value``."""
        return SizeExpr((Term(Poly.constant(value)),))

    @staticmethod
    def of(poly: Poly | Term) -> SizeExpr:
        """The one poly or term."""
        return SizeExpr((poly if isinstance(poly, Term) else Term(poly),))

    @staticmethod
    def largest(terms: Iterable[Term], box: Box) -> SizeExpr:
        """max(terms), the ones proven below another dropped (``MAX_TERMS`` at most: more
        are closed over by one term above them all)."""
        upper = box.upper
        ranked = sorted(dict.fromkeys(terms), key=lambda t: -t.evaluate(upper))
        kept: list[Term] = []
        for term in ranked:
            if any(term_at_least(k, term, box) for k in kept):
                continue
            kept = [k for k in kept if not term_at_least(term, k, box)] + [term]
        if len(kept) > MAX_TERMS:
            kept = [_envelope(kept, box)]
        return SizeExpr(tuple(kept) or (Term(Poly.constant(0)),))

    def plus(self, other: SizeExpr, box: Box) -> SizeExpr:
        """self + other."""
        return SizeExpr.largest((a + b for a in self.terms for b in other.terms), box)

    def max(self, other: SizeExpr, box: Box) -> SizeExpr:
        """max(self, other)."""
        return SizeExpr.largest(self.terms + other.terms, box)

    def at_least(self, other: SizeExpr, box: Box) -> bool:
        """Proof that self >= other over the box: each of other's terms is below one of its."""
        return all(any(term_at_least(p, q, box) for p in self.terms) for q in other.terms)

    @property
    def dims(self) -> frozenset[str]:
        """The dims it depends on."""
        return frozenset().union(*(t.dims for t in self.terms))

    @property
    def is_constant(self) -> bool:
        """True when it depends on no dim."""
        return not self.dims

    def evaluate(self, values: Mapping[str, int]) -> int:
        """Its value with each dim at ``values[dim]``."""
        return max(t.evaluate(values) for t in self.terms)

    def aligned_to(self, alignment: int) -> bool:
        """True when every value it takes is a multiple of ``alignment``."""
        return all(t.aligned_to(alignment) for t in self.terms)

    def text(self) -> str:
        """Python form: ``max(a, b)`` or the one term."""
        if len(self.terms) == 1:
            return self.terms[0].text()
        return "max(" + ", ".join(t.text() for t in self.terms) + ")"

    def c_text(self, ctype: str, maximum: str, align: str) -> str:
        """C form, nesting the two-argument functions named ``maximum`` and ``align``."""
        parts = [t.c_text(ctype, align) for t in self.terms]
        text = parts[-1]
        for part in reversed(parts[:-1]):
            text = f"{maximum}({part}, {text})"
        return text

    def to_json(self) -> list:
        """One ``Term.to_json`` per term."""
        return [t.to_json() for t in self.terms]

    @staticmethod
    def from_json(data: Any) -> SizeExpr:
        """The expression ``to_json`` wrote (``ValueError`` for anything else)."""
        if not isinstance(data, list) or not data:
            raise ValueError("an expression is a non-empty list of terms")
        return SizeExpr(tuple(Term.from_json(t) for t in data))
