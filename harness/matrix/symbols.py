"""Axis values that name a release by its rank on the package index instead of by its number.

    newest              the newest release that fits the cell (its Python, its other pins)
    newest-N            the N newest (N from 1 to 9): N cells, `newest`, `newest.2` ... `newest.N`
    newest.K            the K-th newest (what newest-N expands to)
    5.8-newest-patch    the newest patch release of the 5.8 line

They stay as written when a matrix is loaded (cell ids, nox sessions and tags do not change from one
day to the next) and are resolved when a run starts (newest.py). Until then a selector compares them
through a stand-in: newer than any release a matrix names, or the newest patch of their line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

_RANK = re.compile(r"^newest(?:\.([2-9]))?$")
_COUNT = re.compile(r"^newest-([1-9])$")
_PATCH = re.compile(r"^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})-newest-patch$")
_FAR = 999999  # a release number above any real one: the stand-in for "not yet resolved"
SYNTAX = ("newest, newest-N (N from 1 to 9), newest.K (K from 2 to 9) or MAJOR.MINOR-newest-patch "
          "(e.g. 5.8-newest-patch)")


@dataclass(frozen=True)
class Symbol:
    text: str
    rank: int  # 1: the newest that fits, 2: the one before it ...
    line: tuple[int, int] | None = None  # (major, minor) for MAJOR.MINOR-newest-patch

    def admits(self, version: Version) -> bool:
        """Whether `version` is in the symbol's range (its minor line, if it names one)."""
        return self.line is None or tuple(version.release[:2]) == self.line

    def stand_in(self) -> Version:
        if self.line is None:
            return Version(f"{_FAR}")
        return Version(f"{self.line[0]}.{self.line[1]}.{_FAR}")


def looks_symbolic(value: str) -> bool:
    """Meant as a symbol (so a malformed one gets the symbol syntax in its error, not a version's)."""
    return "newest" in value.lower()


def parse(value: str) -> Symbol | None:
    """The symbol `value` names (one cell's worth: newest-N is expanded first), or None."""
    rank = _RANK.match(value)
    if rank:
        return Symbol(value, int(rank.group(1) or 1))
    patch = _PATCH.match(value)
    if patch:
        return Symbol(value, 1, (int(patch.group(1)), int(patch.group(2))))
    return None


def expand(value: str) -> list[str] | None:
    """A matrix value as the cell values it stands for; None if it is no symbol."""
    count = _COUNT.match(value)
    if count:
        return ["newest" if k == 1 else f"newest.{k}" for k in range(1, int(count.group(1)) + 1)]
    return [value] if parse(value) else None


def comparable(value: str) -> Version:
    """A version to compare `value` with specifiers: itself, or a symbol's stand-in."""
    symbol = parse(value)
    return symbol.stand_in() if symbol else Version(value)
