"""The matrix bench (`nox -s bench -- --matrix`): chosen cells of a matrix run cold serially and with the
defaults side by side, then a warm rerun of the defaults' results, with the breakdown of each and a
comparison of their verdicts entry by entry.

- serial (`old_way` in the figures and the printed table): `--no-reuse --no-fork --jobs 1`, a fresh results
  directory and a fresh environment root;
- defaults (`new_way`): reuse and forked checks, with `--jobs auto`, also fresh;
- warm rerun: the defaults again on the same results directory and environment root;
- a second `nox`: the default session on those results, nox's own start and the session's set-up included.

uv's cache is warmed first (each cell's environment built once into a scratch root), so neither run
pays for downloads. Each run is `harness run --no-report` followed by `harness report`, timed apart.
A flag the harness does not have is left out and named under "harness_lacks", not a crash.

    python -m harness.benchmarks.matrix [--matrix-file F] [--matrix-cells ID ...] [--matrix-tags TAG ...]
                                        [--matrix-defaults-only]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import matrix as matrices
from harness.envs import cellenv, interpreters
from harness.envs.cellenv import die_with_parent
from harness.errors import HarnessError, InputError
from harness.matrix.newest import resolve_cells
from harness.results import verdict_diff
from harness.results.records import write_json_atomic

from . import phases, plan_verdicts, provenance

ROOT = Path(__file__).resolve().parents[2]  # harness/<room>/this.py -> the project
SERIAL_FLAGS = (("--no-reuse",), ("--no-fork",), ("--jobs", "1"))
DEFAULT_FLAGS = (("--jobs", "auto"),)


@dataclass(frozen=True)
class Slice:
    """What to run: cells of a matrix file by id and tag, and optionally only some checks."""

    matrix_file: Path
    cells: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    serial: bool = True  # also the serial run (old_way); without it the defaults and their warm rerun only


def harness_accepts(flags: tuple[str, ...]) -> bool:
    """Whether this harness's `run` takes these arguments (asked of its own parser, nothing is run)."""
    from harness.cli import _parser

    try:
        _parser().parse_args(["run", "matrix.toml", *flags])
    except (HarnessError, SystemExit):
        return False
    return True


def usable_flags(wanted: tuple[tuple[str, ...], ...]) -> tuple[list[str], list[str]]:
    """(the arguments to pass, the ones this harness lacks, each as written)."""
    passed, lacking = [], []
    for flags in wanted:
        if harness_accepts(flags):
            passed.extend(flags)
        else:
            lacking.append(" ".join(flags))
    return passed, lacking


def warm_uv_cache(cells: list, scratch: Path) -> float:
    """Build each cell's environment once into a scratch root so both ways start with uv's cache warm."""
    start = time.perf_counter()
    for cell in cells:
        try:
            python = interpreters.find(cell.python).path if cell.python else None
            cellenv.build(cell.id, cell.requirements, scratch / "envs", scratch / "warm-up.log", python,
                          cell.install.from_index, cell.install.remove, cell.install.from_source,
                          cell.install.build_env, cell.install.overrides())
        except (cellenv.SetupFailed, interpreters.InterpreterMissing):
            pass  # the runs record why this cell cannot be built
    shutil.rmtree(scratch, ignore_errors=True)
    return round(time.perf_counter() - start, 1)


PROC_STAT = Path("/proc/stat")


def cpu_times(stat: Path = PROC_STAT) -> list[int] | None:
    """The machine's CPU time counters (/proc/stat's first line: user, nice, system, idle, iowait, irq, softirq,
    steal, ...), None where there is no such file."""
    try:
        return [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None


def cpu_shares(before: list[int] | None, after: list[int] | None) -> dict:
    """Busy and steal shares of the machine's CPU time between two `cpu_times` readings, in percent. Steal is
    time the hypervisor gave this virtual machine's cores to another guest: a run that saw more of it ran on a
    slower machine, which the load average does not show."""
    if not before or not after or len(before) < 8 or len(after) < 8:
        return {}
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta[:8]) or 1  # guest time is already counted in user
    idle = delta[3] + delta[4]
    return {"cpu_busy_percent": round(100 * (total - idle - delta[7]) / total, 1),
            "cpu_steal_percent": round(100 * delta[7] / total, 1)}


def _harness(argv: list[str], log: Path, cwd: Path) -> tuple[int, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    with open(log, "ab") as out:
        done = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=cwd, env=env, stdout=out,
                              stderr=subprocess.STDOUT, check=False, preexec_fn=die_with_parent)
    return done.returncode, round(time.perf_counter() - start, 2)


def _jobs_line(log: Path) -> str | None:
    """What `--jobs auto` chose and why, as the harness printed it (None when it printed no such line)."""
    return next((line for line in log.read_text(errors="replace").splitlines() if line.startswith("jobs:")), None)


def timed_run(label: str, chosen: Slice, cell_ids: list[str], flags: list[str], out: Path, env_root: Path,
              work: Path) -> dict:
    """One `harness run` then `harness report` of the slice: wall time, load, exit statuses, breakdown."""
    log = work / f"{label}.log"
    load_start, before, cpu_start = os.getloadavg(), phases.snapshot(out), cpu_times()
    argv = ["run", str(chosen.matrix_file), "--cells", *cell_ids, "--out", str(out), "--env-root", str(env_root),
            "--no-report", *flags] + (["--checks", *chosen.checks] if chosen.checks else [])
    run_status, run_s = _harness(argv, log, work)
    report_status, report_s = _harness(["report", str(out)], log, work)
    figures = {"flags": flags, "wall_s": round(run_s + report_s, 2), "run_s": run_s, "report_s": report_s,
               "exit_status": run_status, "report_exit_status": report_status, "jobs": _jobs_line(log),
               "load_average_start": [round(x, 2) for x in load_start],
               "load_average_end": [round(x, 2) for x in os.getloadavg()], **cpu_shares(cpu_start, cpu_times()),
               **phases.breakdown(before, phases.snapshot(out))}
    if run_status:
        figures["log_tail"] = log.read_text(errors="replace")[-1500:]
    return figures


NOX_SESSION = "cpu-fsdp-qwen35"  # the default session: `harness run matrices/cpu.toml`, then the report
NOX_MATRIX = ROOT / "matrices" / "cpu.toml"


def second_nox(chosen: Slice, cell_ids: list[str], out: Path, env_root: Path, work: Path) -> dict:
    """A user's second `nox` on the defaults' results: the command itself, its session set-up included (nox starting,
    reusing the session's environment, installing the harness where pyproject.toml changed), which the warm rerun
    (`harness run` alone) leaves out. It runs once untimed, so that the session's environment exists as after a
    user's first `nox`, then timed. Only for matrices/cpu.toml, the session's matrix."""
    nox = shutil.which("nox")
    if Path(chosen.matrix_file).resolve() != NOX_MATRIX.resolve():
        return {"measured": False, "why": f"`nox` runs {NOX_MATRIX.name}, not {Path(chosen.matrix_file).name}"}
    if nox is None:
        return {"measured": False, "why": "nox is not on PATH"}
    cells = [] if not (chosen.cells or chosen.tags) else ["--cells", *cell_ids]
    argv = [nox, "-f", str(ROOT / "noxfile.py"), "-s", NOX_SESSION, "--", *cells, "--out", str(out),
            "--env-root", str(env_root), *(["--checks", *chosen.checks] if chosen.checks else [])]
    log = work / "second-nox.log"
    figures: dict = {"measured": True, "command": f"nox -s {NOX_SESSION}"}
    for key in ("first_wall_s", "wall_s"):
        start = time.perf_counter()
        with open(log, "ab") as sink:
            done = subprocess.run(argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, check=False,
                                  preexec_fn=die_with_parent)
        figures[key] = round(time.perf_counter() - start, 2)
        figures["exit_status"] = done.returncode
    if figures["exit_status"]:
        figures["log_tail"] = log.read_text(errors="replace")[-1500:]
    return figures


def _keep_cells(out: Path, copy: Path) -> Path:
    """A copy of a results directory's cell files (not logs), to compare with after it is rerun."""
    not_cell_files = lambda _, names: [n for n in names if not n.endswith(".json")]  # noqa: E731
    shutil.copytree(out / "cells", copy / "cells", ignore=not_cell_files)
    return copy


def verdicts(first: Path, second: Path) -> str | list[str]:
    """"identical", or one line per differing entry (or why the two could not be compared)."""
    try:
        found = verdict_diff.compare_dirs(first, second)
    except HarnessError as exc:
        return [f"not compared: {exc}"]
    return [str(d) for d in found] or "identical"


def bench(chosen: Slice, work: Path) -> dict:
    m = matrices.load(chosen.matrix_file)
    # `newest` resolved as the runs will resolve it, so the warm-up builds the same environments.
    cells = resolve_cells(m, m.select(list(chosen.cells) or None, list(chosen.tags) or None))
    ids = [c.id for c in cells]
    old_flags, old_lacks = usable_flags(SERIAL_FLAGS)
    new_flags, new_lacks = usable_flags(DEFAULT_FLAGS)
    figures: dict = {**provenance.stamp(), "matrix": chosen.matrix_file.name,
                     "cells": ids, "checks": list(chosen.checks) or "the matrix's",
                     "whole_matrix": not (chosen.cells or chosen.tags or chosen.checks),
                     "harness_lacks": old_lacks + new_lacks, "uv_cache_warm_up_s": warm_uv_cache(cells, work / "warm"),
                     # uv told to use its cache only: where a package proxy answers the revalidation of a cached
                     # wheel with a new download, every install would fetch torch again despite the warm-up
                     "uv_offline": bool(os.environ.get("UV_OFFLINE"))}
    if chosen.serial:
        figures["old_way"] = timed_run("old-way", chosen, ids, old_flags, work / "old", work / "old-envs", work)
    figures["new_way"] = timed_run("new-way", chosen, ids, new_flags, work / "new", work / "new-envs", work)
    new_cold = _keep_cells(work / "new", work / "new-cold") if (work / "new" / "cells").is_dir() else work / "new-cold"
    if (new_cold / "cells").is_dir():  # docs/launch-plans.md's table is generated from these (docsgen/plans.py)
        figures["launch_plans"] = plan_verdicts.from_cells(new_cold / "cells")
    figures["warm_rerun"] = timed_run("warm-rerun", chosen, ids, new_flags, work / "new", work / "new-envs", work)
    figures["verdicts"] = {"new_vs_warm_rerun": verdicts(new_cold, work / "new")}
    figures["second_nox"] = second_nox(chosen, ids, work / "new", work / "new-envs", work)
    if chosen.serial:
        figures["old_to_new_ratio"] = round(figures["old_way"]["wall_s"] / max(figures["new_way"]["wall_s"], 1e-3),
                                            2)
        figures["verdicts"] = {"old_vs_new": verdicts(work / "old", new_cold), **figures["verdicts"]}
    return figures


HISTORY_KEY = "matrix_runs"  # figures.json: every defaults run of this bench, oldest first
HISTORY_LIMIT = 20
_RUN_KEYS = ("wall_s", "cells_run", "cells_not_installed", "cells_not_installed_here", "cpu_busy_percent",
             "cpu_steal_percent", "exit_status")


def run_summary(group) -> dict | None:
    """A `matrix` group's defaults run (`new_way`) as `matrix_runs` keeps it: its stamps (date, machine with its
    calibration, revision), what it ran and how long it took; None where the group has no timed defaults run."""
    run = group.get("new_way") if isinstance(group, dict) else None
    if not isinstance(run, dict) or not isinstance(run.get("wall_s"), (int, float)):
        return None
    cells = group.get("cells")
    return {**{key: group.get(key) for key in (*provenance.STAMP_KEYS, "load_average_at_start", "matrix")},
            "cells": len(cells) if isinstance(cells, list) else None, "whole_matrix": group.get("whole_matrix"),
            **{key: run.get(key) for key in _RUN_KEYS},
            "megatron_bridge_cell": run.get("megatron_bridge_cell")}


def runs_history(earlier_runs, earlier_group, latest_group) -> list[dict]:
    """figures.json's `matrix_runs` after a bench wrote `latest_group`: the runs kept before it, then it (at most
    HISTORY_LIMIT, the newest). One figure alone hides how far a shared machine's speed moves from one run to the
    next, so every run is kept, on any revision, each with its own stamps. A file from before the list starts it
    with the group it replaces."""
    if isinstance(earlier_runs, list):
        kept = [run for run in earlier_runs if isinstance(run, dict)]
    else:  # a file from before the list
        kept = [first] if (first := run_summary(earlier_group)) is not None else []
    latest = run_summary(latest_group)
    return [*kept, *([latest] if latest is not None else [])][-HISTORY_LIMIT:]


def _row(label: str, values: list) -> str:
    return f"{label:<38}" + "".join(f"{v:>12}" for v in values)


def describe(figures: dict) -> str:
    """The side-by-side table a person reads: wall time, load, and the breakdown of each run."""
    labels = [label for key, label in (("old_way", "old way"), ("new_way", "new way"), ("warm_rerun", "warm rerun"))
              if key in figures]
    runs = [figures[k] for k in ("old_way", "new_way", "warm_rerun") if k in figures]
    lines = [f"matrix {figures['matrix']}: {len(figures['cells'])} cells; {figures['machine']['cores']} cores "
             f"({figures['machine']['cpu']}), {figures['machine']['memory_gib']} GiB",
             *(["harness lacks: " + ", ".join(figures["harness_lacks"]) + " (ran without them)"]
               if figures["harness_lacks"] else []),
             _row("", labels),
             _row("wall s (run + report)", [r["wall_s"] for r in runs]),
             _row("exit status", [r["exit_status"] for r in runs]),
             _row("load average at start / end", [f"{r['load_average_start'][0]}/{r['load_average_end'][0]}"
                                                  for r in runs]),
             _row("CPU busy / steal %", [f"{r.get('cpu_busy_percent', '?')}/{r.get('cpu_steal_percent', '?')}"
                                         for r in runs]),
             _row("cells run / kept", [f"{r['cells_run']}/{r['cells_kept']}" for r in runs]),
             _row("  not installed / this runner's limits",
                  [f"{r.get('cells_not_installed', '?')}/{r.get('cells_not_installed_here', '?')}" for r in runs])]
    for phase in sorted({p for r in runs for p in r["phases_s"]}):
        lines.append(_row(f"  {phase} s", [r["phases_s"].get(phase, 0) for r in runs]))
    for check in sorted({c for r in runs for c in r["checks"]}):
        tallies = [r["checks"].get(check, {"seconds": 0, "ran": 0, "reused": 0}) for r in runs]
        lines.append(_row(f"  {check} s (ran/reused)", [f"{t['seconds']:.1f} ({t['ran']}/{t['reused']})"
                                                         for t in tallies]))
    lines.append(_row("  report s", [r["report_s"] for r in runs]))
    if "old_to_new_ratio" in figures:
        lines.append(f"old / new: {figures['old_to_new_ratio']}x")
    nox_run = figures.get("second_nox") or {}
    if nox_run.get("measured"):
        lines.append(f"a second `{nox_run['command']}` on the defaults' results: {nox_run['wall_s']} s "
                     f"(exit status {nox_run['exit_status']}; the first after the runs {nox_run['first_wall_s']} s)")
    elif nox_run:
        lines.append(f"a second `nox`: not measured ({nox_run['why']})")
    lines += [f"{label}: {run['jobs']}" for label, run in zip(labels, runs) if run["jobs"]]
    for pair, found in figures["verdicts"].items():
        lines.append(f"verdicts {pair.replace('_', ' ')}: " + (found if isinstance(found, str) else
                                                               f"{len(found)} differ\n  " + "\n  ".join(found)))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix-file", type=Path, default=ROOT / "matrices" / "cpu.toml")
    parser.add_argument("--matrix-cells", nargs="+", default=(), metavar="ID", help="cells by id (default: all)")
    parser.add_argument("--matrix-tags", nargs="+", default=(), metavar="TAG", help="cells with any of these tags")
    parser.add_argument("--matrix-checks", nargs="+", default=(), metavar="NAME", help="only these checks")
    parser.add_argument("--matrix-defaults-only", action="store_true",
                        help="leave out the serial run: the defaults cold, then their warm rerun")
    parser.add_argument("--matrix-work", type=Path, default=None,
                        help="keep the runs' results and environments here (default: a temporary directory)")


def slice_from_args(args: argparse.Namespace) -> Slice:
    """The slice the arguments name; InputError, before anything runs, when a cell id or tag matches nothing
    or --matrix-work is not empty."""
    chosen = Slice(args.matrix_file, tuple(args.matrix_cells), tuple(args.matrix_tags), tuple(args.matrix_checks),
                   serial=not args.matrix_defaults_only)
    matrices.load(chosen.matrix_file).select(list(chosen.cells) or None, list(chosen.tags) or None)
    if args.matrix_work is not None and args.matrix_work.exists() and any(args.matrix_work.iterdir()):
        raise InputError(f"--matrix-work {args.matrix_work}: not empty (each way needs fresh directories)")
    return chosen


def run_slice(chosen: Slice, work: Path | None) -> dict:
    """bench() in `work` (kept) or in a temporary directory; prints the side-by-side table."""
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
        figures = bench(chosen, work.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="harness-matrix-bench-") as tmp:
            figures = bench(chosen, Path(tmp))
    print(describe(figures), file=sys.stderr)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks.matrix", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        figures = run_slice(slice_from_args(args), args.matrix_work)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.out:
        write_json_atomic(args.out, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
