"""`python -m harness matrix watch MATRIX`: the releases newer than a matrix names, and the cells crossing
them would add.

For each package axis: every final release on the index above the newest one the matrix pins, with what
it declares (Requires-Python, its requirements on the other axes' packages: vLLM's torch and transformers,
megatron-core's Python), the cells that name a `newest` symbol and so already follow it, and the cells
crossing it adds: each cell that pins the axis's newest named release, with the new release in its place,
marked with the reason when the declared requirements rule it out (a conflict cell).

`main` is the verb: it prints the releases (text or `--json`) and, with `--write FILE`, writes the cells
crossing adds as a matrix file to review and run (`render`). Each cell there is an [[include]] with every axis
it has, its extra pins and its install recipe, so the file runs as it is (`python -m harness run FILE`) and
each table can be copied into the matrix it came from. The [axes] table holds only a backend, model and
device, whose cell (no package at all) is excluded. Conflict cells (ruled out by declared requirements) are
listed in comments, not written as cells.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from harness.errors import InputError
from harness.files import file_problem, write_text_atomic

from . import axes as ax
from . import sources, symbols
from .expand import Cell, Matrix, load
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


def _value(value) -> str:
    return json.dumps(value)  # every value was validated on load: plain strings, which JSON quotes as TOML does


def _inline(table: dict) -> str:
    return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in table.items()) + " }"


def render(m: Matrix, releases: list[NewRelease], index: str, date: str) -> str:
    by_id = {c.id: c for c in m.cells}
    first = next((c for r in releases for c in r.cells if c.conflict is None), None)
    lines = [f"# Cells that crossing the releases newer than {m.path.name} names would add, from", f"# `python -m "
             f"harness matrix watch` on {date} (index {index}). Review them, then copy the [[include]] tables",
             "# wanted into the matrix, or run this file as it is. Tags, known failures and notes are not copied.", "",
             "[matrix]", f"name = {_value(m.name + '-watch')}",
             f"description = {_value('New releases crossed into ' + m.name + ': ' + ', '.join(sorted({r.distribution + ' ' + r.version for r in releases})))}",  # noqa: E501
             f"checks = {_value(list(m.checks))}"]
    if m.timeout:
        lines.append(f"timeout = {m.timeout:g}")
    if m.runner:
        lines.append(f"runner = {_value(m.runner)}")
    if m.python:
        lines.append(f"python = {_value(m.python)}")
    if m.memory_limit_mb:
        lines.append(f"memory_limit_mb = {m.memory_limit_mb}")
    if first is None:
        return "\n".join(lines[:3] + ["# No cell to add."]) + "\n"
    base = {a: [first.axes[a]] for a in ("backend", "model", "device")}
    lines += ["", "[axes]   # only the excluded cell below: every cell is an [[include]]",
              *(f"{a} = {_value(v)}" for a, v in base.items()), "",
              "[[exclude]]", *(f"{a} = \"absent\"" for a in ax.PACKAGE_AXES)]
    for r in releases:
        if r.superseded_by:
            continue
        lines += ["", f"# {r.distribution} {r.version} (the matrix names up to {r.named}); Python "
                      f"{r.requires_python or 'any'}; declares {', '.join(r.declares) or 'nothing on the axes'}"]
        lines += [f"# note: {r.note}"] if r.note else []
        for cell in r.cells:
            if cell.conflict:
                lines.append(f"# not added: {cell.id}: {cell.conflict}")
                continue
            origin = by_id[cell.origin]
            lines += ["", f"[[include]]   # {cell.id}, crossed from {cell.origin}",
                      *(f"{a} = {_value(v)}" for a, v in cell.axes.items())]
            if origin.extra_requirements:
                lines.append(f"requirements = {_value(list(origin.extra_requirements))}")
            if origin.install:
                recipe = {k: v for k, v in origin.install.to_dict().items() if v}
                lines.append("install = { " + ", ".join(
                    f"{k} = {_inline(v) if isinstance(v, dict) else _value(v)}" for k, v in recipe.items()) + " }")
    return "\n".join(lines) + "\n"


def adds_cells(releases: list[NewRelease]) -> bool:
    """Whether crossing the releases adds a cell that can be installed (a matrix file to write)."""
    return any(c.conflict is None for r in releases if not r.superseded_by for c in r.cells)


def write_matrix_file(path: Path, m: Matrix, releases: list[NewRelease], index: str, date: str) -> None:
    """Written whole or not at all, through a temporary file of its own (harness.files): a file already there stays
    until the new one is complete, keeps its mode, and a link in its place is replaced, never followed."""
    write_text_atomic(path, render(m, releases, index, date))


def main(file: Path, as_json: bool, write: Path | None, tags: list[str] | None) -> int:
    """The `matrix watch` verb: load, select, watch, print (text or JSON), write the cells file."""
    m = load(file)
    if write is not None:
        problem = file_problem("--write", write)
        if problem:
            raise InputError(problem)
        if write.resolve() == m.path.resolve():
            raise InputError(f"--write {write}: that is the matrix itself; write the new cells to another file")
    resolver = Resolver()
    releases = watch(m, resolver, m.select(tags=tags) if tags else None)
    if as_json:
        print(json.dumps({"matrix": str(m.path), "index": resolver.index.url, "date": resolver.today.isoformat(),
                          "releases": [r.to_dict() for r in releases]}, indent=1))
    else:
        print(text(m, releases, resolver))
    if write is not None and adds_cells(releases):
        write_matrix_file(write, m, releases, resolver.index.url, resolver.today.isoformat())
    elif write is not None:  # a matrix of no cell would not run: nothing to review, and no file in its place
        print(f"--write {write}: no cell to add; nothing written", file=sys.stderr)
    return 0
