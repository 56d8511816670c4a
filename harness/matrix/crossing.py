"""A row that crosses a package's declared range: verl 0.9.1 declares transformers>=5.5.3,<5.11,!=5.6.0 and
tensordict<=0.10.0, and a verl row may pin transformers 5.23.0 or tensordict 0.15.3 all the same, to show what a
verl user gets who bumps the pin after installing verl. The row then installs exactly the pins verl's declared
requirements exclude through uv's --override (recipe.OutOfRange, in the same override file as `exclude`), shows
it in its install order, and records each one so the report says "outside verl's declared range: transformers
5.23.0 (verl 0.9.1 declares transformers!=5.6.0,<5.11,>=5.5.3)". A pin inside the range gets no override.

The ranges are the crossed release's declared requirements (metadata.py), with the row's extra (`verl[cpu]`
declares torch==2.11.0 where plain verl declares no torch), read when the matrix expands (cached beside the
matrices, as the derived values are) or, for a `newest` verl, when the run resolves it. Nothing is guessed: a
release whose requirements cannot be read is an error, not a row without overrides. A git revision of verl has no
index metadata: its row gets no override, and a pin outside the revision's range is the resolver's conflict.
"""
from __future__ import annotations

from typing import Protocol

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from . import axes as ax
from . import sources, symbols
from .metadata import allows
from .recipe import OutOfRange


class Declarations(Protocol):
    """What reads releases' declared requirements (newest.Resolver)."""

    metadata: object

    def requirement_on(self, distribution: str, version: str, target: str, python: str,
                       extra: str = "") -> SpecifierSet | None: ...


def _release(value: str | None) -> bool:
    """An exact release (not a symbol, a derived value or a git revision): what metadata can be read for."""
    return bool(value) and not symbols.parse(value) and not sources.is_source(value) and "as-pinned-by-" not in value


def out_of_range(axes: dict[str, str], python: str, declarations: Declarations) -> tuple[OutOfRange, ...]:
    """The cell's pins that its crossed packages' declared requirements exclude, in axis order; ValueError
    (one line) when the crossed release's requirements cannot be read or a pin is not a version."""
    found = []
    extras = ax.extras_of(axes)
    for axis in ax.CROSSED_AXES:
        version = axes.get(axis)
        if not _release(version):
            continue
        dist, extra = ax.PACKAGE_AXES[axis], extras.get(axis, "")
        declared = declarations.metadata.declared(dist, version)
        if not declared.source:
            raise ValueError(f"{dist} {version}: its declared requirements cannot be read ({'; '.join(declared.notes)}"
                             f"), so no pin of the row can be judged inside or outside its range")
        named = f"{dist}[{extra}]" if extra else dist
        for other, other_dist in ax.PACKAGE_AXES.items():
            pinned = axes.get(other)
            if other == axis or not _release(pinned):
                continue
            try:
                pin = Version(pinned)
            except InvalidVersion:
                raise ValueError(f"{other} = {pinned!r} is no version to judge against {named} {version}") from None
            spec = declarations.requirement_on(dist, version, other_dist, python, extra)
            if spec is not None and not allows(spec, pin):
                found.append(OutOfRange(other_dist, pinned, named, version, str(spec)))
    return tuple(found)
