"""Short human-readable texts shared by the reports: byte counts and shapes."""

from __future__ import annotations

from collections.abc import Mapping

from tensorplan.specs.spec import TensorSpec, dim_text

_UNITS = ("KiB", "MiB", "GiB", "TiB")


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units with one decimal, plain bytes below 1 KiB.

    >>> human_bytes(512), human_bytes(918016), human_bytes(3 * 2**20)
    ('512 B', '896.5 KiB', '3.0 MiB')
    """
    if abs(n) < 1024:
        return f"{n} B"
    value = float(n)
    for unit in _UNITS:
        value /= 1024
        if abs(value) < 1024 or unit == _UNITS[-1]:
            break
    return f"{value:.1f} {unit}"


def bytes_text(n: int) -> str:
    """Exact bytes with thousands separators, and the binary-unit size beside them.

    >>> bytes_text(918016), bytes_text(80)
    ('918,016 B (896.5 KiB)', '80 B')
    """
    exact = f"{n:,} B"
    return exact if abs(n) < 1024 else f"{exact} ({human_bytes(n)})"


def shape_text(spec: TensorSpec, names: Mapping[str, str]) -> str:
    """Dims in brackets; a symbolic dim reads ``size<=upper bound`` in the Dim names of
    ``names`` (symbol -> name), e.g. ``[1, seq<=128, 64]``."""
    dims = (dim_text(s, u, names) for s, u in zip(spec.sym_shape, spec.shape, strict=True))
    return f"[{', '.join(dims)}]"
