"""The worst of several errors, with NaN the worst of all (pure Python: the checks import it too).

Python's `max` compares with `>`, which is False for NaN, so a NaN anywhere but first loses to any finite
value: `max([0.001, nan, 0.002])` is 0.002, and a comparison against a tolerance then passes. Every pick
of a worst error in the checks and trainers goes through these instead, and a tolerance is tested as
`error <= tolerance` (False for NaN), never as `not error > tolerance`.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping


def _rank(value: float) -> tuple[int, float]:
    """Sort key: NaN above everything, +inf, then the numbers."""
    value = float(value)
    return (1, 0.0) if math.isnan(value) else (0, value)


def worst(values: Iterable[float], default: float | None = None) -> float:
    """The largest value, or NaN if any is NaN; `default` for none (ValueError without one)."""
    values = list(values)
    if not values:
        if default is None:
            raise ValueError("worst() of no values and no default")
        return default
    return float(max(values, key=_rank))


def worst_key(errors: Mapping[Hashable, float]) -> Hashable:
    """The key of the largest error, a NaN's first if there is one."""
    if not errors:
        raise ValueError("worst_key() of no errors")
    return max(errors, key=lambda key: _rank(errors[key]))


def differs(difference: float) -> bool:
    """Whether a difference is not exactly zero; NaN is a difference."""
    return not float(difference) == 0.0

