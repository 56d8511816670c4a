"""The execution verbs: `run` (a matrix's cells into a results directory), `check` (one check in this
environment) and, inside a cell's environment, `envinfo` and `checkserver`.

`run` is a short list of steps, in order in `cmd_run`, each a function of the run so far: load the matrix
and check the options against it, select the cells, resolve `newest` to releases, check that the index has
every pinned release, plan how many cells run at once, execute them under the results directory's lock, and
render the report. `run --here` (harness/offline) runs its rows through the same execute and render.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from harness import checks, matrix
from harness.envs import devices
from harness.errors import DONE, InputError
from harness.matrix import Cell, Matrix, index, newest
from harness.offline import command as offline_command

from . import check_process, runner
from .check_process import check_directory, check_seed_and_steps
from .jobs import Budget
from .jobs import plan as plan_jobs


def add_parser(sub) -> None:
    run = sub.add_parser("run", help="run the cells of a matrix file and write their results")
    run.add_argument("file", type=Path)
    run.add_argument("--cells", nargs="+", default=None, metavar="ID")
    run.add_argument("--tags", nargs="+", default=None, metavar="TAG")
    run.add_argument("--checks", nargs="+", default=None, metavar="NAME")
    run.add_argument("--out", type=Path, default=None, help="default: reports/<matrix name>")
    run.add_argument("--env-root", type=Path, default=Path(os.environ.get("HARNESS_ENV_ROOT", ".harness/envs")))
    run.add_argument("--jobs", default="auto", metavar="N|auto",
                     help="cells at once (default auto: from usable cores and available memory)")
    run.add_argument("--no-fork", action="store_true",
                     help="each check in a fresh interpreter (default: forked from one per cell that imports once)")
    run.add_argument("--redo", action="store_true", help="run finished cells again")
    run.add_argument("--no-reuse", action="store_true",
                     help="run every check, even where another cell's result was made with the same loaded versions")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--steps", type=int, default=None)
    run.add_argument("--timeout", type=float, default=None, help="seconds per check (default: the matrix's)")
    run.add_argument("--retries", type=int, default=2, help="extra tries after an infra failure or a crash")
    run.add_argument("--no-index-check", action="store_true", help="do not ask the index whether releases exist")
    run.add_argument("--no-report", action="store_true", help="do not render the report after the run")
    # A cell run inside its container image by a host run that already holds the directory's lock.
    run.add_argument("--under-host-lock", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--ray", default=None, metavar="ADDRESS",
                     help="run the cells as Ray tasks on a cluster: host:port, ray://host:port, auto, or local "
                          "(starts one on this machine)")
    offline_command.add_run_options(run)

    check_process.add_arguments(sub.add_parser("check", help="run one check in the current environment"))
    sub.add_parser("envinfo", help="print this environment's capture as JSON")
    # Inside a cell: import once, fork each check (forkserver.py); not for users.
    srv = sub.add_parser("checkserver")
    srv.add_argument("--preload", default=None, help="comma-separated modules (default: forkserver.PRELOAD)")


@dataclass
class Run:
    """What the steps of `run` know so far."""

    args: argparse.Namespace
    matrix: Matrix
    out: Path  # the results directory
    jobs: int | None  # cells at once; None: auto, decided by `plan`
    cells: list[Cell] = field(default_factory=list)
    budget: Budget | None = None  # what the cells share while they run
    chosen: str | None = None  # the line that says why so many cells run at once


def cmd_run(args) -> int:
    """`run FILE`: the steps below, in order; with --here, the rows on this interpreter (harness/offline)."""
    unknown = checks.unknown_checks(args.checks or [])
    if unknown:
        raise InputError(f"--checks: unknown check {unknown[0]!r}; expected one of {', '.join(checks.CHECKS)}")
    if args.here:  # on the interpreter at hand, from a wheelhouse only: no index, no environment (harness/offline)
        check_seed_and_steps(args)
        return offline_command.run_here(args, lambda m, cells, prepare, after: _run_here(args, m, cells, prepare,
                                                                                         after))
    extra = next((o for o, v in (("--wheelhouse", args.wheelhouse), ("--device", args.device), ("--have", args.have),
                                 ("--dry-run", args.dry_run)) if v), None)
    if extra:
        raise InputError(f"{extra}: only with --here")
    from .run import results_lock

    run = load(args)
    select(run)
    resolve(run)
    check_index(run)
    plan(run)
    with nullcontext() if args.under_host_lock else results_lock(run.out):  # one run per directory
        execute(run)
        render(run.out, args)
    return DONE


def load(args) -> Run:
    """The matrix file, and the run's options checked against it: a bad option stops the run before any cell."""
    m = matrix.load(args.file)
    jobs = _jobs(args.jobs)
    check_seed_and_steps(args)
    out = args.out or Path("reports") / m.name
    check_directory("--out", out)
    check_directory("--env-root", args.env_root)
    if not 0 <= args.retries <= 10:
        raise InputError("--retries: expected a whole number from 0 to 10")
    if args.timeout is not None and not 0 < args.timeout <= 7 * 24 * 3600:
        raise InputError(f"--timeout: expected seconds above 0 and at most a week, got {args.timeout:g}")
    if args.ray is not None:
        from .ray_dispatch import import_ray, validate_address

        validate_address(args.ray)
        import_ray()
    return Run(args, m, out, jobs)


def select(run: Run) -> None:
    """The cells asked for (--cells, --tags), on a machine that has their devices."""
    run.cells = run.matrix.select(run.args.cells, run.args.tags)
    # On Ray the cluster's nodes hold the devices (the dispatcher checks their resources), not this machine.
    for device in sorted({c.axes["device"] for c in run.cells}) if run.args.ray is None else ():
        devices.require(device, f"matrix {run.matrix.path.name}")


def resolve(run: Run) -> None:
    """`newest` and the like: the releases on the index now (matrix/newest.py), each said once."""
    run.cells = newest.resolve_cells(run.matrix, run.cells)
    for line in sorted({f"{r.axis} {r.text()}" for c in run.cells for r in c.resolved}):
        print(f"resolved: {line}", file=sys.stderr)


def check_index(run: Run) -> None:
    """Every release the cells that will run pin exists on the package index, before anything is built (not with
    --no-index-check). A cell whose results are complete is kept, not built: its releases are not asked about
    (a warm rerun asks the index nothing but what `newest` needs)."""
    if run.args.no_index_check:
        return
    from .run import to_run

    pending = to_run(run.cells, run.out, tuple(run.args.checks or ()), run.args.redo)
    if pending:
        index.check_cells(pending, run.matrix.locate)


def plan(run: Run) -> None:
    """How many cells run at once and the budget of cores, memory and devices they share (jobs.py); on Ray the
    dispatcher places the cells on the cluster's resources instead."""
    if run.args.ray is not None:
        return
    visible = {device: devices.visible_devices(device)
               for device in sorted({c.axes.get("device", "cpu") for c in run.cells} - {"cpu"})}
    run.jobs, run.budget, run.chosen = plan_jobs(run.cells, run.jobs, visible, runner.STOPPING)


def execute(run: Run) -> None:
    """Run the cells into the results directory: on this machine (run.run_matrix) or as Ray tasks."""
    from .cell import RunOptions
    from .run import run_matrix

    args, m = run.args, run.matrix
    opts = RunOptions(out_dir=run.out, env_root=args.env_root, jobs=run.jobs or 1, redo=args.redo,
                      checks=tuple(args.checks or ()), seed=args.seed, steps=args.steps, timeout=args.timeout,
                      retries=args.retries, reuse=not args.no_reuse, fork=not args.no_fork, budget=run.budget)
    print(f"matrix {m.name}: {len(run.cells)} cells, checks {', '.join(opts.checks or m.checks)} -> {run.out}",
          file=sys.stderr)
    if run.chosen:
        print(run.chosen, file=sys.stderr)
    if args.ray is not None:
        from .ray_dispatch import run_on_ray

        run_on_ray(m, run.cells, opts, args.ray)
    else:
        run_matrix(m, run.cells, opts)


def render(out: Path, args) -> None:
    """The report of the results directory, every format written into it (not with --no-report)."""
    if args.no_report:
        return
    from harness.report.pipeline import write_report

    for path in write_report(out):
        print(f"wrote {path}", file=sys.stderr)


def _run_here(args, m: Matrix, cells: list[Cell], prepare, after_rows) -> None:
    """`run --here`'s execute and render: the rows on this interpreter (`prepare`), then `after_rows`."""
    from .cell import RunOptions
    from .run import results_lock, run_matrix

    out = args.out or Path("reports") / m.name
    opts = RunOptions(out_dir=out, env_root=args.env_root, jobs=1, redo=args.redo, checks=tuple(args.checks or ()),
                      seed=args.seed, steps=args.steps, timeout=args.timeout, retries=args.retries, reuse=False,
                      fork=not args.no_fork, prepare=prepare)
    with results_lock(out):
        print(f"matrix {m.name}: {len(cells)} rows here on {sys.executable} -> {out}", file=sys.stderr)
        run_matrix(m, cells, opts)
        after_rows(out)
        render(out, args)


def _jobs(value: str) -> int | None:
    """--jobs: a whole number of at least 1, or auto (None: decided once the cells are known)."""
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"--jobs: expected a whole number of at least 1 or auto, got {value!r}")
    return int(value)


def cmd_check(args) -> int:
    """`check NAME`: one check in this environment, as a check's own process runs it."""
    return check_process.run(args)


def cmd_envinfo(args) -> int:
    import json

    from harness.envs.envinfo import capture

    print(json.dumps(capture(), indent=1))
    return DONE


def cmd_checkserver(args) -> int:
    from . import forkserver

    return forkserver.main(tuple(filter(None, args.preload.split(","))) if args.preload is not None else None)
