"""`python -m harness`: matrix list, run, check, report, plan (and envinfo, used inside cells).

The dispatcher: the top parser and a table of verbs. Each verb lives in its room as `add_parser(sub)` and
`cmd_<verb>(args)`; the run's own steps are in harness/execution/command.py. User errors print one line and
exit with their own status, and SIGTERM ends a run as Ctrl-C does (errors.exit_status); HARNESS_DEBUG=1 shows
the traceback.
"""
from __future__ import annotations

from harness.ci import github as ci_command
from harness.errors import ArgumentParser, exit_status
from harness.execution import command as execution_command
from harness.matrix import command as matrix_command
from harness.offline import command as offline_command
from harness.plans import verdict as plan_command
from harness.preflight import command as preflight_command
from harness.preflight import cpu_side as cpuside_command
from harness.report import command as report_command
from harness.rerun import bisect, repro


def _parser() -> ArgumentParser:
    top = ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    matrix_command.add_parser(sub)
    execution_command.add_parser(sub)
    report_command.add_parser(sub)
    repro.add_parser(sub)
    bisect.add_parser(sub)
    ci_command.add_parser(sub)
    plan_command.add_parser(sub)
    preflight_command.add_parser(sub)
    cpuside_command.add_parser(sub)
    offline_command.add_parser(sub)
    return top


COMMANDS = {"matrix": matrix_command.cmd_matrix, "run": execution_command.cmd_run,
            "check": execution_command.cmd_check, "report": report_command.cmd_report,
            "envinfo": execution_command.cmd_envinfo, "checkserver": execution_command.cmd_checkserver,
            "repro": repro.cmd_repro, "bisect": bisect.cmd_bisect, "ci": ci_command.cmd_ci,
            "plan": plan_command.cmd_plan, "preflight": preflight_command.cmd_preflight,
            "cpu-side": cpuside_command.cmd_cpu_side, "wheelhouse": offline_command.cmd_wheelhouse}


def main(argv: list[str] | None = None) -> int:
    def dispatch() -> int:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command](args)

    return exit_status(dispatch)
