"""`python -m harness`: matrix list, run, check, report, plan (and envinfo, used inside cells).

Each command is a short pipeline of the steps in the other modules: load the matrix, select
cells, validate releases, run, render. User errors print one line and exit with their own status
(see errors.py); HARNESS_DEBUG=1 shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

from harness import checks, matrix
from harness.envs import devices
from harness.errors import INTERRUPTED, HarnessError, InputError
from harness.execution import runner
from harness.execution.lock import results_lock
from harness.matrix import index, newest
from harness.offline import command as offline_command
from harness.plans import command as plan_command
from harness.preflight import command as preflight_command
from harness.preflight import cpuside_command
from harness.report import command as report_command
from harness.results.directories import directory_problem
from harness.results.records import write_json_atomic


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: exit 2, one line
        raise InputError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    top = _Parser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ml = sub.add_parser("matrix", help="inspect matrix files").add_subparsers(dest="action", required=True,
                                                                             parser_class=_Parser)
    lst = ml.add_parser("list", help="list the cells of a matrix file")
    lst.add_argument("file", type=Path)
    lst.add_argument("--tags", nargs="+", default=None)
    lst.add_argument("--json", action="store_true")

    wt = ml.add_parser("watch", help="releases newer than a matrix names, and the cells crossing them would add")
    wt.add_argument("file", type=Path)
    wt.add_argument("--json", action="store_true")
    wt.add_argument("--write", type=Path, default=None, metavar="FILE", help="write those cells as a matrix file")
    wt.add_argument("--tags", nargs="+", default=None, help="cross only into the cells with any of these tags")

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

    chk = sub.add_parser("check", help="run one check in the current environment")
    chk.add_argument("name")
    chk.add_argument("--json", action="store_true")
    chk.add_argument("--model", choices=("text", "vl", "moe"), default="text")
    chk.add_argument("--backend", choices=("fsdp", "megatron"), default="fsdp")
    chk.add_argument("--mode", choices=("sync", "fully-async"), default="sync")
    chk.add_argument("--model-config", type=Path, default=None)
    chk.add_argument("--seed", type=int, default=0)
    chk.add_argument("--steps", type=int, default=None)
    chk.add_argument("--max-ranks", type=int, default=None,
                     help="the most ranks the check may start at once (bridge-parity: 1 runs only its one-rank jobs)")
    chk.add_argument("--work-dir", type=Path, default=None,
                     help="where the check writes its work files (default: a temporary directory, removed "
                          "unless the check fails, then kept and named)")
    chk.add_argument("--result-file", type=Path, default=None, help=argparse.SUPPRESS)

    report_command.add_parser(sub)

    sub.add_parser("envinfo", help="print this environment's capture as JSON")
    # Inside a cell: import once, fork each check (execution/forkserver.py); not for users.
    srv = sub.add_parser("checkserver")
    srv.add_argument("--preload", default=None, help="comma-separated modules (default: forkserver.PRELOAD)")

    rp = sub.add_parser("repro", help="rebuild a cell's exact environment from its lock and rerun one check")
    rp.add_argument("cell")
    rp.add_argument("--check", required=True)
    rp.add_argument("--dir", type=Path, action="append", default=None, help="results directory (default: reports/)")
    rp.add_argument("--env-root", type=Path, default=Path(".harness/repro-envs"))
    rp.add_argument("--json", action="store_true")

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

    gha = sub.add_parser("ci", help="GitHub Actions helpers").add_subparsers(dest="action", required=True,
                                                                            parser_class=_Parser)
    jm = gha.add_parser("matrix", help="job matrix JSON from a `nox -l --json -t cell` listing")
    jm.add_argument("listing", type=Path)
    jm.add_argument("--matrices", type=Path, default=Path("matrices"))
    jm.add_argument("--container", choices=("yes", "no", "any"), default="any",
                    help="only cells that run in a container image (yes), only those that do not (no)")
    jm.add_argument("--preflight", type=Path, default=None, metavar="RESULTS",
                    help="leave out the cells whose pre-flight under RESULTS/<matrix>/preflight/ cannot install")
    sm = gha.add_parser("summary", help="print a report's Markdown cut below GitHub's 1 MiB summary limit")
    sm.add_argument("markdown", type=Path)
    sm.add_argument("--link", required=True, help="where the full report is published")
    cy = gha.add_parser("carry", help="copy into a partial run's results the previous results' cells it did not run")
    cy.add_argument("previous", type=Path)
    cy.add_argument("results", type=Path)
    plan_command.add_parser(sub)
    preflight_command.add_parser(sub)
    cpuside_command.add_parser(sub)
    offline_command.add_parser(sub)
    return top


SEED_LIMIT = 2**32  # numpy's limit; torch's is higher: a seed must work for both


def _check_seed_and_steps(args) -> None:
    if not 0 <= args.seed < SEED_LIMIT:
        raise InputError(f"--seed: expected a whole number from 0 to {SEED_LIMIT - 1}, got {args.seed}")
    if args.steps is not None and args.steps < 1:
        raise InputError(f"--steps: expected a whole number of at least 1, got {args.steps}")


def _check_directory(option: str, path: Path) -> None:
    problem = directory_problem(option, path)
    if problem:
        raise InputError(problem)


def _check_model_config(path: Path, kind: str) -> None:
    """A --model-config must be a JSON object of keys the model's config has, finite, with sizes >= 1: a typo
    would otherwise test the default model in silence. The trainers' own reading (trainers.models) decides;
    the keys are checked where this environment has Qwen3.5."""
    if not path.is_file():
        raise InputError(f"--model-config: {path} is not a file")
    from trainers.models import Qwen35Unavailable, check_override, read_override

    try:
        override = read_override(path)
        check_override(kind, override, f"--model-config {path}")
    except Qwen35Unavailable:  # no Qwen3.5 here: the check itself reports that
        return
    except ValueError as exc:
        raise InputError(str(exc)) from None


def cmd_matrix(args) -> int:
    if args.action == "watch":
        from harness.matrix.watch_cli import main as watch

        return watch(args.file, args.json, args.write, args.tags)
    m = matrix.load(args.file)
    cells = m.select(tags=args.tags) if args.tags else m.cells
    if args.json:
        print(json.dumps([{"id": c.id, "axes": c.axes, "tags": list(c.tags), "checks": list(c.checks),
                           "requirements": c.requirements} for c in cells], indent=1))
    else:
        for c in cells:
            print(f"{c.id}  [{', '.join(c.tags)}]")
        print(f"{len(cells)} cells", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    from harness.execution.run import RunOptions, run_matrix

    unknown = checks.unknown_checks(args.checks or [])
    if unknown:
        raise InputError(f"--checks: unknown check {unknown[0]!r}; expected one of {', '.join(checks.CHECKS)}")
    if args.here:  # on the interpreter at hand, from a wheelhouse only: no index, no environment (harness/offline)
        _check_seed_and_steps(args)
        return offline_command.run_here(args, lambda m, cells, prepare, after: _run_here(args, m, cells, prepare,
                                                                                         after))
    extra = next((o for o, v in (("--wheelhouse", args.wheelhouse), ("--device", args.device), ("--have", args.have),
                                 ("--dry-run", args.dry_run)) if v), None)
    if extra:
        raise InputError(f"{extra}: only with --here")
    m = matrix.load(args.file)
    jobs = _jobs(args.jobs)
    _check_seed_and_steps(args)
    out = args.out or Path("reports") / m.name
    _check_directory("--out", out)
    _check_directory("--env-root", args.env_root)
    if not 0 <= args.retries <= 10:
        raise InputError("--retries: expected a whole number from 0 to 10")
    if args.timeout is not None and not 0 < args.timeout <= 7 * 24 * 3600:
        raise InputError(f"--timeout: expected seconds above 0 and at most a week, got {args.timeout:g}")
    if args.ray is not None:
        from harness.execution.ray_dispatch import import_ray, validate_address

        validate_address(args.ray)
        import_ray()
    cells = m.select(args.cells, args.tags)
    # On Ray the cluster's nodes hold the devices (the dispatcher checks their resources), not this machine.
    for device in sorted({c.axes["device"] for c in cells}) if args.ray is None else ():
        devices.require(device, f"matrix {m.path.name}")
    cells = newest.resolve_cells(m, cells)  # `newest` and the like: releases on the index now (matrix/newest.py)
    for line in sorted({f"{r.axis} {r.text()}" for c in cells for r in c.resolved}):
        print(f"resolved: {line}", file=sys.stderr)
    if not args.no_index_check:
        wanted: dict[str, set[str]] = {}
        for cell in cells:
            for dist, version in cell.pinned_releases().items():
                wanted.setdefault(dist, set()).add(version)
        index.check_releases(wanted, m.locate)
    chosen = budget = None
    if args.ray is None:  # on Ray the dispatcher places cells on the cluster's resources
        from harness.execution import jobs as job_choice

        visible = {device: devices.visible_devices(device)
                   for device in sorted({c.axes.get("device", "cpu") for c in cells} - {"cpu"})}
        jobs, budget, chosen = job_choice.plan(cells, jobs, visible, runner.STOPPING)
    opts = RunOptions(out_dir=out, env_root=args.env_root, jobs=jobs or 1, redo=args.redo,
                      checks=tuple(args.checks or ()), seed=args.seed, steps=args.steps, timeout=args.timeout,
                      retries=args.retries, reuse=not args.no_reuse, fork=not args.no_fork, budget=budget)
    with nullcontext() if args.under_host_lock else results_lock(out):  # one run per directory (execution/lock.py)
        print(f"matrix {m.name}: {len(cells)} cells, checks {', '.join(opts.checks or m.checks)} -> {out}",
              file=sys.stderr)
        if chosen:
            print(chosen, file=sys.stderr)
        if args.ray is not None:
            from harness.execution.ray_dispatch import run_on_ray

            run_on_ray(m, cells, opts, args.ray)
        else:
            run_matrix(m, cells, opts)
        if not args.no_report:
            _write_report(out)
    return 0


def _run_here(args, m, cells, prepare, after_rows) -> None:
    from harness.execution.run import RunOptions, run_matrix

    out = args.out or Path("reports") / m.name
    opts = RunOptions(out_dir=out, env_root=args.env_root, jobs=1, redo=args.redo, checks=tuple(args.checks or ()),
                      seed=args.seed, steps=args.steps, timeout=args.timeout, retries=args.retries, reuse=False,
                      fork=not args.no_fork, prepare=prepare)
    with results_lock(out):
        print(f"matrix {m.name}: {len(cells)} rows here on {sys.executable} -> {out}", file=sys.stderr)
        run_matrix(m, cells, opts)
        after_rows(out)
        if not args.no_report:
            _write_report(out)


def _jobs(value: str) -> int | None:
    """--jobs: a whole number of at least 1, or auto (None: decided once the cells are known)."""
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise InputError(f"--jobs: expected a whole number of at least 1 or auto, got {value!r}")
    return int(value)


def _write_report(directory: Path) -> None:
    from harness.report.pipeline import write_report

    for path in write_report(directory):
        print(f"wrote {path}", file=sys.stderr)


def cmd_check(args) -> int:
    from harness.checks import CheckOptions

    if args.name not in checks.CHECKS:
        raise InputError(f"unknown check {args.name!r}; expected one of {', '.join(checks.CHECKS)}")
    spec = checks.CHECKS[args.name]
    if args.backend not in spec.backends:  # the matrix skips such a cell; asked for by name, it is an error
        raise InputError(f"--backend {args.backend}: check {args.name} runs on backend "
                         f"{' or '.join(spec.backends)} only")
    _check_seed_and_steps(args)
    if args.model_config is not None:
        _check_model_config(args.model_config, args.model)
    if args.work_dir is not None:
        _check_directory("--work-dir", args.work_dir)
    work = args.work_dir or (args.result_file.parent if args.result_file else None)
    scratch = work is None
    if scratch:
        # Never litter the current directory (a run from the repository root once almost committed one).
        work = Path(tempfile.mkdtemp(prefix=f"harness-check-{args.name}-"))
    if args.max_ranks is not None and args.max_ranks < 1:
        raise InputError(f"--max-ranks: expected a whole number of ranks, at least 1, got {args.max_ranks}")
    options = CheckOptions(model=args.model, backend=args.backend, seed=args.seed, steps=args.steps,
                           model_config=args.model_config, work_dir=work, mode=args.mode, max_ranks=args.max_ranks)
    result = runner.execute(args.name, options)
    if scratch and not result.status.is_failure:
        shutil.rmtree(work, ignore_errors=True)
    elif scratch:
        print(f"work files kept in {work}", file=sys.stderr)
    if args.result_file:
        write_json_atomic(args.result_file, result.to_dict())
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"{result.check}: {result.status.value} - {result.message}")
        for verdict in result.verdicts:
            print(f"  {verdict.name}: {verdict.status.value} - {verdict.message}")
    return 1 if result.status.is_failure else 0


def cmd_envinfo(args) -> int:
    from harness.envs.envinfo import capture

    print(json.dumps(capture(), indent=1))
    return 0


def cmd_checkserver(args) -> int:
    from harness.execution import forkserver

    return forkserver.main(tuple(filter(None, args.preload.split(","))) if args.preload is not None else None)


def cmd_repro(args) -> int:
    from harness.trust.repro import check_cell_id, repro

    check_cell_id(args.cell)
    if args.check not in checks.CHECKS:
        raise InputError(f"--check: unknown check {args.check!r}; expected one of {', '.join(checks.CHECKS)}")
    result = repro(args.cell, args.check, args.dir or [Path("reports")], args.env_root)
    print(json.dumps(result.to_dict(), indent=1) if args.json else f"{args.cell} {result.check}: "
          f"{result.status.value} - {result.message}")
    return 1 if result.status.is_failure else 0


def cmd_bisect(args) -> int:
    from harness.execution.run import RunOptions, run_cell
    from harness.trust.bisect import check_order, check_verdict, default_out, run_bisect

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


def cmd_ci(args) -> int:
    from harness.ci import github as ci

    if args.action == "matrix":
        container = {"yes": True, "no": False, "any": None}[args.container]
        jobs = ci.main_matrix(args.listing, args.matrices, container)
        if args.preflight is not None:
            from harness.preflight.dispatch import installable_jobs

            kept, dropped = installable_jobs(json.loads(jobs), args.preflight)
            jobs = json.dumps(kept)
            for line in dropped:
                print(line, file=sys.stderr)
        print(jobs)
        return 0
    if args.action == "carry":
        from harness.ci.carry import carry

        carried = carry(args.previous, args.results)
        print(f"carried {len(carried)} cells from {args.previous} into {args.results}")
        return 0
    try:
        text = args.markdown.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{args.markdown}: cannot read ({exc.strerror})") from None
    sys.stdout.write(ci.cut_summary(text, args.link))
    return 0


COMMANDS = {"matrix": cmd_matrix, "run": cmd_run, "check": cmd_check, "report": report_command.cmd_report,
            "envinfo": cmd_envinfo, "ci": cmd_ci, "repro": cmd_repro, "bisect": cmd_bisect,
            "plan": plan_command.cmd_plan, "checkserver": cmd_checkserver, "preflight": preflight_command.cmd_preflight,
            "cpu-side": cpuside_command.cmd_cpu_side,
            "wheelhouse": offline_command.cmd_wheelhouse}


def _interrupt_on_signals() -> None:
    """SIGTERM (a CI runner cancelling the job) ends the run like Ctrl-C: children are killed,
    finished cell files stay, and the next run finishes the remaining cells. SIGINT does so even when the
    run was started in the background by a non-interactive shell, which starts it with SIGINT ignored
    (Python then installs no handler of its own and a `kill -INT` would be lost)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    _interrupt_on_signals()
    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except HarnessError as exc:
        if os.environ.get("HARNESS_DEBUG"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED



