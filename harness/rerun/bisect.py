"""First bad release: `python -m harness bisect --package transformers --good 5.3.0 --bad 5.9.0
--check NAME [--verdict NAME] [--cell-template ID]`.

Lists the releases between the two from the package index, builds a cell for each from a
template cell (its other pins kept), and bisects to the first release where the check's verdict
differs from the good end's, running only O(log n) cells. Works for any package axis.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness import checks, matrix
from harness.checks import VERDICTS, gives_verdict
from harness.errors import InputError
from harness.matrix import Cell, Matrix
from harness.matrix import axes as ax
from harness.matrix.index import PackageIndex
from harness.results.records import CellResult


def add_parser(sub) -> None:
    bs = sub.add_parser("bisect", help="find the first release where a check's verdict changes")
    bs.add_argument("--package", required=True, help="transformers, tensordict, torch, vllm, ...")
    bs.add_argument("--good", required=True)
    bs.add_argument("--bad", required=True)
    bs.add_argument("--check", required=True)
    bs.add_argument("--verdict", default=None, help="one verdict of the check, e.g. upstream")
    bs.add_argument("--cell-template", default=None, metavar="ID")
    bs.add_argument("--matrix", type=Path, default=Path("matrices/cpu.toml"))
    bs.add_argument("--out", type=Path, default=None)
    bs.add_argument("--env-root", type=Path, default=Path(os.environ.get("HARNESS_ENV_ROOT", ".harness/envs")))


def cmd_bisect(args) -> int:
    """Check the arguments, run the bisection's cells under the results directory's lock, write bisect.json."""
    from harness.execution.cell import RunOptions, run_cell
    from harness.execution.run import results_lock
    from harness.matrix import newest
    from harness.results.records import write_json_atomic

    if args.check not in checks.CHECKS:
        raise InputError(f"--check: unknown check {args.check!r}; expected one of {', '.join(checks.CHECKS)}")
    check_order(args.good, args.bad)
    check_verdict(args.check, args.verdict)
    m = matrix.load(args.matrix)
    out = args.out or default_out(args.package, args.good, args.bad)
    opts = RunOptions(out_dir=out, env_root=args.env_root, checks=(args.check,))

    def run_one(cell):
        print(f"bisect: running {cell.id}", file=sys.stderr)
        return run_cell(newest.resolve_cells(m, [cell])[0], m, opts)  # a template's other `newest` axes

    with results_lock(out):
        result = run_bisect(m, args.package, args.good, args.bad, args.check, args.verdict, args.cell_template,
                            run_one)
    write_json_atomic(out / "bisect.json", {"package": result.package, "check": result.check,
                                            "first_changed": str(result.first_changed or ""),
                                            "last_same": str(result.last_same or ""), "verdicts": result.verdicts,
                                            "cells": result.cells})
    print(result.summary())
    return 0 if result.first_changed is not None else 1


def package_axis(package: str) -> str:
    """The matrix axis of a package given by axis name or distribution name."""
    for axis, dist in ax.PACKAGE_AXES.items():
        if package in (axis, dist):
            return axis
    raise InputError(f"--package: {package!r} is not a package axis; expected one of "
                     f"{', '.join(ax.PACKAGE_AXES.values())}")


def check_verdict(check: str, verdict: str | None) -> None:
    if verdict is None:
        return
    if not gives_verdict(check, verdict):
        given = ", ".join(VERDICTS[check]) or "none: bisect on its status without --verdict"
        raise InputError(f"--verdict: {check} gives no verdict {verdict!r}; its verdicts: {given}")


def check_order(good: str, bad: str) -> Version:
    """--good must be the older end: the search reports the first release unlike it."""
    try:
        lo, hi = Version(good), Version(bad)
    except InvalidVersion as exc:
        raise InputError(f"--good/--bad: {exc}") from None
    if lo > hi:
        raise InputError(f"--good {lo} is newer than --bad {hi}: --good is the older release, whose verdict is "
                         "the reference (to find a fix, pass the broken older release as --good)")
    return lo


def releases_between(index: PackageIndex, distribution: str, good: str, bad: str) -> list[Version]:
    """Final releases from good to bad inclusive, oldest first; both ends must exist."""
    lo, hi = check_order(good, bad), Version(bad)
    available = index.versions(distribution)
    if not available:
        raise InputError(f"--package: {distribution!r} not found on {index.url}")
    for end, value in (("--good", lo), ("--bad", hi)):
        if not index.has(distribution, str(value)):
            raise InputError(f"{end}: {distribution} {value} is not a release on {index.url}")
    if lo == hi:
        raise InputError(f"--good and --bad are the same release ({lo}): nothing to bisect")
    public = sorted({Version(v.public) for v in available if not v.is_prerelease and not v.is_devrelease})
    return [v for v in public if lo <= v <= hi]


@dataclass
class Bisection:
    package: str
    check: str
    first_changed: Version | None
    last_same: Version | None
    verdicts: dict[str, str] = field(default_factory=dict)  # version -> verdict, for every cell run
    cells: dict[str, str] = field(default_factory=dict)  # version -> cell id

    def summary(self) -> str:
        tried = ", ".join(f"{v}: {s}" for v, s in sorted(self.verdicts.items(), key=lambda kv: Version(kv[0])))
        if self.first_changed is None:
            return f"{self.check}: the verdict does not change between the ends ({tried})"
        return (f"{self.check}: first {self.package} release with a different verdict is {self.first_changed} "
                f"(last like the good end: {self.last_same}); verdicts: {tried}")


def bisect(versions: list[Version], verdict_of: Callable[[Version], str], package: str = "",
           check: str = "") -> Bisection:
    """Binary search for the first version whose verdict differs from versions[0]'s.

    Assumes one change in the range (a regression or a fix); `verdict_of` is called at most
    2 + ceil(log2(n)) times.
    """
    if len(versions) < 2:
        raise InputError("a bisect range needs at least two releases")
    seen: dict[str, str] = {}

    def verdict(v: Version) -> str:
        if str(v) not in seen:
            seen[str(v)] = verdict_of(v)
        return seen[str(v)]

    good = verdict(versions[0])
    if verdict(versions[-1]) == good:
        return Bisection(package, check, None, None, seen)
    lo, hi = 0, len(versions) - 1  # verdict(lo) == good, verdict(hi) != good
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if verdict(versions[mid]) == good:
            lo = mid
        else:
            hi = mid
    return Bisection(package, check, versions[hi], versions[lo], seen)


def cell_for(template: Cell, axis: str, version: Version) -> Cell:
    axes_values = {**template.axes, axis: str(version)}
    qualified = template.id != ax.cell_id(template.axes)  # the template's image needed its hash suffix
    return Cell(template.matrix, ax.cell_id(axes_values, qualified), axes_values, template.tags, template.checks,
                template.known_failures, template.runner, template.extra_requirements, python=template.python,
                install=template.install)


def verdict_text(result: CellResult, check: str, verdict: str | None) -> str:
    """The verdict compared between releases: its status, and for a verdict that lists its failing cases
    (metrics["mismatches"], as verl-tests' test files do) those cases too, so a release that breaks one more test
    of a file already failing is a change."""
    outcome = result.check(check)
    if outcome is None:
        return "missing"
    if verdict is None:
        return outcome.status.value
    match = next((v for v in outcome.verdicts if v.name == verdict), None)
    if match is None:
        return f"no verdict {verdict!r} ({outcome.status.value})"
    cases = sorted({str(m.get("case")) for m in match.metrics.get("mismatches") or [] if isinstance(m, dict)})
    return match.status.value + (f" ({', '.join(cases)})" if cases else "")


def template_cell(m: Matrix, axis: str, cell_id: str | None, check: str | None = None) -> Cell:
    """The cell whose other pins the bisection keeps: --cell-template, else one with the axis (a smoke cell
    first) and every axis the check needs (verl-tests: the verl axis)."""
    needed = checks.CHECKS[check].needs_axes if check in checks.CHECKS else ()
    needs = (axis, *needed)
    if cell_id:
        cell = m.select(ids=[cell_id])[0]
        lacking = [name for name in needed if name not in cell.axes]
        if lacking:
            raise InputError(f"--cell-template {cell_id}: the cell has no {' or '.join(lacking)} axis, which "
                             f"{check} needs (it says nothing in a cell without it)")
        return cell
    fitting = [cell for cell in m.cells if all(name in cell.axes for name in needs)]
    for cell in fitting:
        if "smoke" in cell.tags:
            return cell
    if fitting:
        return fitting[0]
    raise InputError(f"{m.path}: no cell has the {' and '.join(needs)} axes; pass --cell-template")


def run_bisect(m: Matrix, package: str, good: str, bad: str, check: str, verdict: str | None,
               template_id: str | None, run_one: Callable[[Cell], CellResult],
               index: PackageIndex | None = None) -> Bisection:
    check_verdict(check, verdict)
    axis = package_axis(package)
    template = template_cell(m, axis, template_id, check)
    versions = releases_between(index or PackageIndex(), ax.PACKAGE_AXES[axis], good, bad)
    cells: dict[str, str] = {}

    def verdict_of(version: Version) -> str:
        cell = cell_for(template, axis, version)
        cells[str(version)] = cell.id
        return verdict_text(run_one(cell), check, verdict)

    result = bisect(versions, verdict_of, ax.PACKAGE_AXES[axis], check + (f"/{verdict}" if verdict else ""))
    result.cells = cells
    return result


def default_out(package: str, good: str, bad: str) -> Path:
    return Path("reports") / f"bisect-{package}-{good}-{bad}"
