"""Passing ranges: per package, the versions in which every check passed (PASS_RANGE_RULE says how).

A row that gives no evidence either way is left out: one this runner could not install, one only the CPU
pre-flight has looked at (an install verdict, no check run), and one checked on CPU only (an accelerator
row's CPU-side run: its GPU-only kernels cannot run there).
"""
from __future__ import annotations

from collections.abc import Iterable

from harness.results.install_verdict import RUNNER, of_check
from harness.results.records import CellResult, Status
from harness.results.sources import CPU_SIDE_KEY

from .model import FAILING, PACKAGE_AXES, PassRange
from .order import version_key
from .safe_text import clean_text

PASS_RANGE_RULE = ("Per package, the versions in which every check passed: the largest set of versions, axis by axis, "
                   "within which every tested combination passes (pass, affected and skip do not count as failing; "
                   "fail, error, crash and timeout do, and so do a declared known failure (xfail), a standing "
                   "finding and pins that cannot be installed together, so no range lists a version in which a "
                   "check failed; a combination this runner could not install gives no evidence either way). "
                   "Versions are left "
                   "out one at a time, the one with "
                   "the largest share of failing combinations first, so a version that fails everywhere (a "
                   "transformers release without Qwen3.5) does not make the other packages look broken. Each "
                   "failing or partly failing version shows how many of its tested combinations pass.")


_FAILED = FAILING | {Status.XFAIL}  # a declared known failure failed all the same


def _is_failing(cell: CellResult) -> bool | None:
    """True, False, or None for no evidence (its environment is not installable on this runner). Every check that
    failed counts, a declared known failure's and a standing finding's included: the version failed it, whatever
    other versions did."""
    # A cell with no check results gives no evidence of support, so it never counts as passing.
    if not cell.checks:
        return True
    if _FAILED.isdisjoint([c.status for c in cell.checks]):
        return False
    installs = [of_check(c) for c in cell.checks if c.status is Status.ERROR]
    if installs and all(v is not None and v.kind == RUNNER for v in installs):
        return None
    return True


def _blamed(combos: list[tuple[tuple, bool]]) -> set[tuple[int, str]]:
    """The (axis position, version) pairs to leave out so that every remaining combination passes.

    Greedy: while a remaining combination fails, leave out the version with the largest share of
    failing combinations among its remaining ones (ties: more failures, then axis and version order).
    A version that fails everywhere (transformers without Qwen3.5) goes first, so it does not make
    every other package look broken. Counts are updated as combinations drop out.
    """
    counts: dict[tuple[int, str], list[int]] = {}  # pair -> [remaining combinations, remaining failing]
    members: dict[tuple[int, str], list[int]] = {}
    for index, (values, failing) in enumerate(combos):
        for position, value in enumerate(values):
            if value:
                count = counts.setdefault((position, value), [0, 0])
                count[0] += 1
                count[1] += failing
                members.setdefault((position, value), []).append(index)
    alive = [True] * len(combos)
    left = sum(failing for _, failing in combos)
    blamed: set[tuple[int, str]] = set()
    while left:
        candidates = [p for p, c in counts.items() if c[1]]
        if not candidates:  # failing combinations with no package version to blame (no package axes)
            break
        pair = max(candidates, key=lambda p: (counts[p][1] / counts[p][0], counts[p][1], -p[0], version_key(p[1])))
        blamed.add(pair)
        for index in members[pair]:
            if alive[index]:
                alive[index] = False
                values, failing = combos[index]
                left -= failing
                for position, value in enumerate(values):
                    if value:
                        counts[(position, value)][0] -= 1
                        counts[(position, value)][1] -= failing
    return blamed


def pass_ranges(cells: Iterable[CellResult], axes: Iterable[str] = PACKAGE_AXES) -> list[PassRange]:
    """Per package axis: the supported versions (see PASS_RANGE_RULE) as runs, with per-version counts."""
    axes = list(axes)
    judged: dict[tuple, bool] = {}  # per combination of the axes' values: cells of one row share one
    for cell in cells:
        failing = _is_failing(cell)
        if failing is None or (cell.environment.get("preflight") and not failing) or cell.environment.get(CPU_SIDE_KEY):
            # not installable here, or installs with no check run yet, or checked on CPU only (an accelerator row's
            # CPU pre-flight: its GPU-only kernels cannot run there): no evidence of support either way
            continue
        key = tuple([cell.axes.get(axis) for axis in axes])
        judged[key] = judged.get(key, False) or failing
    combos = list(judged.items())
    blamed = _blamed(combos)
    ranges = []
    for position, axis in enumerate(axes):
        tally: dict[str, list[int]] = {}  # version -> [passing combinations, combinations]
        supported: set[str] = set()
        for values, failing in combos:
            value = values[position]
            if not value:
                continue
            tally.setdefault(value, [0, 0])[1] += 1
            tally[value][0] += not failing
            if not failing and not any((i, v) in blamed for i, v in enumerate(values) if v):
                supported.add(value)
        if not tally:
            continue
        tested = sorted(tally, key=version_key)
        segments: list[list[str]] = []
        previous_passed = False
        for value in tested:
            if value in supported:
                if previous_passed:
                    segments[-1].append(value)
                else:
                    segments.append([value])
            previous_passed = value in supported
        ranges.append(PassRange(axis, [clean_text(v, 60) for v in tested],
                                [clean_text(v, 60) for v in tested if v in supported],
                                [[clean_text(v, 60) for v in seg] for seg in segments],
                                {clean_text(v, 60): tuple(tally[v]) for v in tested}))
    return ranges
