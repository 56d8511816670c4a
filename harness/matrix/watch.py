"""`python -m harness matrix watch MATRIX`: the releases newer than a matrix names, and the cells crossing
them would add.

For each package axis: every final release on the index above the newest one the matrix pins, with what
it declares (Requires-Python, its requirements on the other axes' packages: vLLM's torch and transformers,
megatron-core's Python), the cells that name a `newest` symbol and so already follow it, and the cells
crossing it adds: each cell that pins the axis's newest named release, with the new release in its place,
marked with the reason when the declared requirements rule it out (a conflict cell).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from . import axes as ax
from . import sources, symbols
from .expand import Cell, Matrix
from .newest import Resolver, allows, harness_python, marker_environment


@dataclass
class Crossing:
    id: str
    axes: dict[str, str]
    origin: str  # the cell it was crossed from (the same stack with the matrix's newest named release)
    conflict: str | None = None


@dataclass
class NewRelease:
    axis: str
    distribution: str
    version: str
    named: str  # the newest release of the axis the matrix pins
    requires_python: str = ""
    declares: list[str] = field(default_factory=list)  # its requirements on the other axes' packages
    followed_by: list[str] = field(default_factory=list)  # cells whose `newest` symbol may take it
    cells: list[Crossing] = field(default_factory=list)
    superseded_by: str = ""  # a newer patch of its minor line, which is crossed instead
    note: str = ""  # why this machine cannot run its cells (its pip constraints)

    def to_dict(self) -> dict:
        return {"axis": self.axis, "distribution": self.distribution, "version": self.version, "named": self.named,
                "requires_python": self.requires_python, "declares": self.declares,
                "followed_by": self.followed_by, "cells": [vars(c) for c in self.cells],
                "superseded_by": self.superseded_by, "note": self.note}


_AXIS_DISTS = {canonicalize_name(d) for d in ax.PACKAGE_AXES.values()}


def _declares(lines: tuple[str, ...], python: str) -> list[str]:
    """Its requirements on packages a matrix varies, where they apply (Linux, `python`, no extras)."""
    kept, env = [], marker_environment(python)
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in _AXIS_DISTS and (req.marker is None or req.marker.evaluate(env)):
            kept.append(f"{req.name}{req.specifier}")
    return sorted(set(kept))


def _pins(cell: Cell, axis: str) -> dict[str, str]:
    pins = {ax.PACKAGE_AXES[a]: v for a, v in cell.axes.items()
            if a in ax.PACKAGE_AXES and a != axis and not symbols.parse(v)}
    pins.update({(req := Requirement(r)).name: str(next(iter(req.specifier)).version) for r in cell.extra_requirements})
    return pins


def watch(m: Matrix, resolver: Resolver | None = None, cross: list[Cell] | None = None) -> list[NewRelease]:
    """The new releases of every package axis of `m`, crossed into `cross` (default: all its cells)."""
    resolver = resolver or Resolver()
    cross = m.cells if cross is None else cross
    # Crossings are judged on declared requirements alone; a machine's own cap is a note, not a conflict.
    declared_misfit = Resolver(resolver.index, resolver.metadata, resolver.today, limits={})
    found = []
    for axis, dist in ax.PACKAGE_AXES.items():
        pinned = [Version(c.axes[axis]) for c in m.cells if axis in c.axes and not symbols.parse(c.axes[axis])
                  and not sources.is_source(c.axes[axis])]  # a git revision is no release to compare
        following = [c for c in m.cells if axis in c.axes and symbols.parse(c.axes[axis])]
        if not pinned:
            continue
        top = max(pinned)
        origins = [c for c in cross if c.axes.get(axis) == str(top)]
        newer = sorted(v for v in resolver.releases(dist) if v > top)
        limit = resolver.limits.get(canonicalize_name(dist))
        for version in newer:
            declared = resolver.metadata.declared(dist, version)
            release = NewRelease(axis, dist, str(version), str(top), declared.requires_python,
                                 _declares(declared.requires_dist, harness_python()),
                                 [c.id for c in following if symbols.parse(c.axes[axis]).admits(version)])
            found.append(release)
            patch = max(v for v in newer if v.release[:2] == version.release[:2])
            if patch != version:  # 2.14.0 when 2.14.1 is out: only the newest patch of a line is crossed
                release.superseded_by = str(patch)
                continue
            if limit is not None and not allows(limit, version):
                release.note = f"this machine's pip constraints cap {dist}{limit}: its cells run on other runners"
            seen = set()
            for cell in origins:
                axes = {**cell.axes, axis: str(version)}
                cid = ax.cell_id(axes)
                if cid in seen:
                    continue
                seen.add(cid)
                why = declared_misfit.misfit(dist, version, _pins(cell, axis), cell.python or harness_python())
                release.cells.append(Crossing(cid, axes, cell.id, why))
    return found


def text(m: Matrix, releases: list[NewRelease], resolver: Resolver) -> str:
    lines = [f"{m.path}: releases newer than the matrix names, on {resolver.index.url} "
             f"({resolver.today.isoformat()})"]
    if not releases:
        lines.append("none: every package axis names its newest release")
    for r in releases:
        fits = [c for c in r.cells if c.conflict is None]
        lines.append(f"{r.distribution} {r.version} (the matrix names up to {r.named}): "
                     f"Python {r.requires_python or 'any'}; declares {', '.join(r.declares) or 'nothing on the axes'}")
        if r.superseded_by:
            lines.append(f"  not crossed: {r.superseded_by} is a newer patch of its line")
            continue
        if r.note:
            lines.append(f"  note: {r.note}")
        if r.followed_by:
            lines.append(f"  followed by its newest cells: {', '.join(r.followed_by)}")
        lines.append(f"  crossing adds {len(fits)} cell(s), {len(r.cells) - len(fits)} conflict cell(s):")
        lines += [f"    {c.id}" + (f"  conflict: {c.conflict}" if c.conflict else "") for c in r.cells]
    return "\n".join(lines)
