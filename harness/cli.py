"""`python -m harness`: matrix list, run, check, report, plan (and envinfo, used inside cells).

The dispatcher: the top parser and a table of verbs. Each verb lives in its room as `add_parser(sub)` and
`cmd_<verb>(args)`; the run's own steps are in harness/execution/command.py. User errors print one line and
exit with their own status, and SIGTERM ends a run as Ctrl-C does (errors.exit_status); HARNESS_DEBUG=1 shows
the traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.ci import github as ci_command
from harness.errors import ArgumentParser, BaselineChanged, InputError, NewFailures, exit_status
from harness.execution import command as execution_command
from harness.matrix import command as matrix_command
from harness.offline import command as offline_command
from harness.plans import verdict as plan_command
from harness.preflight import command as preflight_command
from harness.preflight import cpu_side as cpuside_command
from harness.rerun import bisect, repro


def _parser() -> ArgumentParser:
    top = ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    matrix_command.add_parser(sub)
    execution_command.add_parser(sub)
    _add_report_parser(sub)
    repro.add_parser(sub)
    bisect.add_parser(sub)
    ci_command.add_parser(sub)
    plan_command.add_parser(sub)
    preflight_command.add_parser(sub)
    cpuside_command.add_parser(sub)
    offline_command.add_parser(sub)
    return top


def _add_report_parser(sub) -> None:
    rep = sub.add_parser("report", help="render the support table of a results directory")
    rep.add_argument("dir", type=Path)
    rep.add_argument("--format", choices=("md", "html", "json", "junit", "support"), default=None,
                     help="print one format to stdout instead of writing every format into DIR")
    rep.add_argument("--previous", type=Path, default=None, metavar="OLD_DIR",
                     help="compare with a previous results directory (e.g. a downloaded CI artifact)")
    rep.add_argument("--fail-on-new", action="store_true", help="exit 5 when there are new failures")
    rep.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                     help="exit 6 when a (cell, check) status differs from this committed baseline")
    rep.add_argument("--write-baseline", type=Path, default=None, metavar="FILE",
                     help="write DIR's (cell, check) statuses as the baseline FILE")


def cmd_report(args) -> int:
    from harness.report import (
        build_report,
        compare_with,
        load_results,
        read_run_info,
        render,
        render_report,
        to_json,
    )
    from harness.results.compare import new_failures

    if args.fail_on_new and args.previous is None:
        raise InputError("--fail-on-new needs --previous OLD_DIR")
    expected = _read_baseline(args)  # a bad baseline is bad input (exit 2), said before anything is written
    if args.format is None:
        paths, changes = render_report(args.dir, previous=args.previous)
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
    else:
        cells, problems = load_results(args.dir)
        if not cells:
            from harness.errors import ResultsError

            raise ResultsError(f"{args.dir}: no readable cell results" + (f" ({problems[0]})" if problems else ""))
        info, info_problems = read_run_info(args.dir)
        changes, previous_problems = compare_with(cells, args.previous) if args.previous else (None, [])
        report = build_report(cells, title=info.get("title", ""), notes=info.get("notes", []),
                              problems=[*problems, *info_problems, *previous_problems],
                              changes=None if changes is None else {(c.cell_id, c.check): c.kind for c in changes})
        print(json.dumps(to_json(report), indent=1) if args.format == "json" else render(report, args.format),
              end="" if args.format != "json" else "\n")
    if changes and all(change.before is None for change in changes):
        print(f"--previous {args.previous}: shares no (cell, check) with {args.dir}; nothing was compared",
              file=sys.stderr)
    _baseline(args, expected)
    fresh = new_failures(changes or [])
    if fresh:
        print(f"{len(fresh)} new failures: " + ", ".join(f"{c.cell_id} {c.check}" for c in fresh[:10]), file=sys.stderr)
        if args.fail_on_new:
            raise NewFailures(f"{len(fresh)} new failures against {args.previous}")
    return 0


def _read_baseline(args) -> dict | None:
    if args.baseline is None:
        return None
    from harness.report import load_results
    from harness.report.baseline import read_baseline

    return read_baseline(args.baseline, {cell.matrix for cell in load_results(args.dir)[0]})


def _baseline(args, expected: dict | None) -> None:
    """--write-baseline, then --baseline: exit 6 naming every (cell, check) that differs."""
    if args.baseline is None and args.write_baseline is None:
        return
    from harness.report import load_results
    from harness.report.baseline import differences, write_baseline

    cells, _ = load_results(args.dir)
    if args.write_baseline is not None:
        write_baseline(args.write_baseline, cells, f"python -m harness report {args.dir} --write-baseline "
                                                   f"{args.write_baseline}")
        print(f"wrote {args.write_baseline}", file=sys.stderr)
    if args.baseline is not None:
        found = differences(expected, cells)
        for difference in found:
            print(f"baseline: {difference}", file=sys.stderr)
        if found:
            raise BaselineChanged(f"{len(found)} verdicts differ from {args.baseline}: " + "; ".join(
                map(str, found[:5])) + (" ..." if len(found) > 5 else "") + "; if intended, rewrite it with "
                f"--write-baseline {args.baseline} and commit it")


# verb -> its command (each room's parser is added in _parser).
COMMANDS = {"matrix": matrix_command.cmd_matrix, "run": execution_command.cmd_run,
            "check": execution_command.cmd_check, "report": cmd_report, "envinfo": execution_command.cmd_envinfo,
            "checkserver": execution_command.cmd_checkserver, "repro": repro.cmd_repro, "bisect": bisect.cmd_bisect,
            "ci": ci_command.cmd_ci, "plan": plan_command.cmd_plan, "preflight": preflight_command.cmd_preflight,
            "cpu-side": cpuside_command.cmd_cpu_side, "wheelhouse": offline_command.cmd_wheelhouse}


def main(argv: list[str] | None = None) -> int:
    def dispatch() -> int:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return exit_status(dispatch)
