"""The offline verbs: `wheelhouse MATRIX --have FILE --out DIR` (where there is a network) and
`run MATRIX --here --wheelhouse DIR` (on the box; `--dry-run` checks the plan anywhere, against `--have`)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from harness import matrix
from harness.envs import devices
from harness.errors import InputError
from harness.matrix import Cell
from harness.matrix.axes import CHOICE_AXES, PYTHON_RE, cell_id
from harness.results.directories import directory_problem

from . import benchmarks, box_interpreter, wheelhouse
from . import manifest as wheel_manifest

DEFAULT_PLATFORM = "x86_64-manylinux_2_28"


def add_parser(sub) -> None:
    wh = sub.add_parser("wheelhouse", help="download the wheels an offline interpreter lacks for some cells")
    wh.add_argument("file", type=Path)
    wh.add_argument("--cells", nargs="+", default=None, metavar="ID")
    wh.add_argument("--tags", nargs="+", default=None, metavar="TAG")
    wh.add_argument("--have", type=Path, required=True, metavar="FILE",
                    help="what the target interpreter has: its `pip freeze` (name==version lines)")
    wh.add_argument("--out", type=Path, required=True, metavar="DIR")
    wh.add_argument("--limit-mb", type=float, default=wheelhouse.DEFAULT_LIMIT_MB,
                    help=f"refuse a wheelhouse above this size (default {wheelhouse.DEFAULT_LIMIT_MB})")
    wh.add_argument("--platform", default=DEFAULT_PLATFORM, help=f"the box's platform (default {DEFAULT_PLATFORM})")
    wh.add_argument("--python", default=None, help="the box's Python (default: the cells' own)")
    wh.add_argument("--dry-run", action="store_true", help="print what would be downloaded; download nothing")


def add_run_options(run) -> None:
    run.add_argument("--here", action="store_true",
                     help="run on this interpreter, installing only from --wheelhouse (never the network)")
    run.add_argument("--wheelhouse", type=Path, default=None, metavar="DIR", help="with --here: the wheels to use")
    run.add_argument("--device", choices=CHOICE_AXES["device"], default=None,
                     help="with --here: run the rows on this device instead of theirs (cpu: a dry run on a CPU)")
    run.add_argument("--have", type=Path, default=None, metavar="FILE",
                     help="with --here --dry-run: check against this `pip freeze` list instead of this interpreter")
    run.add_argument("--dry-run", action="store_true",
                     help="with --here: check the interpreter and the wheelhouse, print the plan, run nothing")
    run.add_argument("--no-benchmarks", action="store_true",
                     help="with --here: leave out the matrix's benchmarks (`[matrix] benchmarks`), run the rows only")


def _python_of(cells: list[Cell], given: str | None) -> str:
    named = {c.python for c in cells if c.python}
    if given is not None:
        if not PYTHON_RE.match(given):
            raise InputError(f"--python: expected a Python version like 3.12, got {given!r}")
        return given
    if len(named) != 1:
        raise InputError("--python: the cells name " + (f"several Pythons ({', '.join(sorted(named))})" if named else
                                                        "no Python") + "; say which the box has")
    return named.pop()


def cmd_wheelhouse(args) -> int:
    if not wheel_manifest.PLATFORM_RE.match(args.platform):
        raise InputError(f"--platform: expected x86_64-manylinux_2_NN or aarch64-manylinux_2_NN, got {args.platform!r}")
    if not 0 < args.limit_mb <= 100_000:
        raise InputError(f"--limit-mb: expected MiB above 0, got {args.limit_mb:g}")
    problem = directory_problem("--out", args.out)
    if problem:
        raise InputError(problem)
    m = matrix.load(args.file)
    cells = m.select(args.cells, args.tags)
    python = _python_of(cells, args.python)
    benchmarks.check_names(m.benchmarks, m.path)
    box = box_interpreter.read(args.have)
    manifest = wheelhouse.build(cells, m.name, box, args.out, args.platform, python,
                                int(args.limit_mb * wheelhouse.MIB), fetch=not args.dry_run, bench=m.benchmarks)
    for cid, entry in manifest["cells"].items():
        print(f"{cid}: from the wheelhouse {', '.join(entry['add']) or 'nothing'}; from the interpreter "
              + ", ".join(f"{d} {v}" for d, v in entry["from_interpreter"].items()))
    for name in manifest["benchmarks"]:
        print(benchmarks.plan_line(name, manifest))
    verb = "would hold" if args.dry_run else "holds"
    size = manifest["total_bytes"] / wheelhouse.MIB
    print(f"wheelhouse {args.out} {verb} {len(manifest['files'])} wheels, {size:.1f} MiB of its {args.limit_mb:g} MiB "
          f"limit, for {args.platform}, Python {python}", file=sys.stderr)
    return 0


def _on_device(cells: list[Cell], manifest: dict, device: str | None) -> tuple[list[Cell], dict]:
    """The cells moved to `device` (their ids follow), and the manifest's entries under the new ids."""
    if device is None:
        return cells, manifest
    moved, entries = [], {}
    for cell in cells:
        axes = {**cell.axes, "device": device}
        new = dataclasses.replace(cell, id=cell_id(axes), axes=axes)
        moved.append(new)
        if cell.id in manifest["cells"]:
            entries[new.id] = manifest["cells"][cell.id]
    return moved, {**manifest, "cells": entries}


def _check_offline_install(cells: list[Cell], bench: tuple[str, ...], manifest: dict, directory: Path) -> None:
    """Each row's and each benchmark's wheelhouse pins are in the folder, whole, for the box's platform and Python
    (a benchmark left out of the wheelhouse has none)."""
    foreign = wheel_manifest.foreign_wheels(directory, manifest)
    if foreign:  # an installer given the folder could take one of them for a release the manifest hashed
        raise InputError(f"--wheelhouse {directory}: {foreign[0]}" + (f" and {len(foreign) - 1} more" if foreign[1:]
                         else "") + f" not in its {wheel_manifest.MANIFEST}; the box installs only the manifest's "
                         "files: remove them or rebuild the wheelhouse")
    for cell in cells:
        wheel_manifest.verify(directory, manifest, list(manifest["cells"][cell.id].get("add", [])), f"row {cell.id}")
    for name in bench:
        entry = manifest.get("benchmarks", {}).get(name) or {}
        wheel_manifest.verify(directory, manifest, list(entry.get("add", [])), f"benchmark {name}")


def run_here(args, run_options) -> int:
    """`run --here`: refuse a mismatched interpreter, then run (or, with --dry-run, print the plan)."""
    if args.wheelhouse is None:
        raise InputError("--here needs --wheelhouse DIR (build it with `python -m harness wheelhouse`)")
    if args.have is not None and not args.dry_run:
        raise InputError("--have: only with --dry-run; a run checks the interpreter it runs on")
    m = matrix.load(args.file)
    benchmarks.check_names(m.benchmarks, m.path)
    manifest = wheel_manifest.read(args.wheelhouse)
    cells, manifest = _on_device(m.select(args.cells, args.tags), manifest, args.device)
    bench = () if args.no_benchmarks else m.benchmarks
    if args.have is not None:
        box, python, source = box_interpreter.read(args.have), str(manifest["target"]["python"]), str(args.have)
    else:
        box, python = box_interpreter.current(), box_interpreter.interpreter_python()
        source = f"this interpreter ({sys.executable})"
    box_interpreter.refuse_mismatches(cells, manifest, box, python, source)
    wheels = sum(f.stat().st_size for f in Path(args.wheelhouse).glob("*.whl"))
    if wheels > int(manifest.get("limit_bytes", wheels)):
        raise InputError(f"--wheelhouse {args.wheelhouse}: {wheels / wheelhouse.MIB:.1f} MiB of wheels, over its "
                         f"{manifest['limit_bytes'] / wheelhouse.MIB:g} MiB limit")
    checks = args.checks or list(m.checks)
    _check_offline_install(cells, bench, manifest, args.wheelhouse)  # before anything runs, on the box too
    if args.dry_run:
        for cell in cells:
            entry = manifest["cells"][cell.id]
            print(f"{cell.id} on {cell.axes['device']}: from {source}: "
                  + ", ".join(f"{d} {v}" for d, v in entry["from_interpreter"].items())
                  + f"; from the wheelhouse: {', '.join(entry['add']) or 'nothing'}; checks: {', '.join(checks)}")
        for name in bench:
            print(benchmarks.plan_line(name, manifest))
        print(f"dry run: {len(cells)} rows match {source} and install from {args.wheelhouse} offline "
              f"({wheels / wheelhouse.MIB:.1f} MiB); nothing ran", file=sys.stderr)
        return 0
    used = sorted({c.axes["device"] for c in cells})
    for device in used:
        devices.require(device, f"matrix {m.path.name}")
    overlays, folder = Path(args.env_root) / "overlays", Path(args.wheelhouse).resolve()
    device = next((d for d in used if d != "cpu"), "cpu")

    def after_rows(out: Path) -> None:  # the benchmarks, on the rows' device, once the rows are done
        for name in bench:
            result = benchmarks.run(name, manifest, folder, overlays, out, device)
            print(f"benchmark {name} on {device}: {result['status']}"
                  + (f" ({result['reason']})" if result.get("reason") else ""), file=sys.stderr)

    run_options(m, cells, box_interpreter.preparer(manifest, folder, overlays), after_rows)
    return 0
