"""`matrix watch --write FILE`: the cells crossing new releases would add, as a matrix file to review and run.

Each cell is an [[include]] with every axis it has, its extra pins and its install recipe, so the file
runs as it is (`python -m harness run FILE`) and each table can be copied into the matrix it came from.
The [axes] table holds only a backend, model and device, whose cell (no package at all) is excluded.
Conflict cells (ruled out by declared requirements) are listed in comments, not written as cells.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import axes as ax
from .expand import Matrix
from .watch import NewRelease


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


def write(path: Path, m: Matrix, releases: list[NewRelease], index: str, date: str) -> None:
    """Written whole or not at all: a file already there stays until the new one is complete."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(m, releases, index, date), encoding="utf-8")
    tmp.replace(path)
