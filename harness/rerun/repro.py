"""`python -m harness repro CELL_ID --check NAME`: rebuild a cell's exact environment from its recorded lock
and rerun one check in it (the report shows this command for each entry)."""
from __future__ import annotations

import json
from pathlib import Path

from harness import checks
from harness.envs import cellenv, interpreters
from harness.errors import CHECK_FAILED, DONE, EnvironmentMissing, InputError
from harness.execution import runner
from harness.matrix.axes import CELL_ID_RE
from harness.results.records import CheckResult, load_cell


def add_parser(sub) -> None:
    rp = sub.add_parser("repro", help="rebuild a cell's exact environment from its lock and rerun one check")
    rp.add_argument("cell")
    rp.add_argument("--check", required=True)
    rp.add_argument("--dir", type=Path, action="append", default=None, help="results directory (default: reports/)")
    rp.add_argument("--env-root", type=Path, default=Path(".harness/repro-envs"))
    rp.add_argument("--json", action="store_true")


def cmd_repro(args) -> int:
    check_cell_id(args.cell)
    if args.check not in checks.CHECKS:
        raise InputError(f"--check: unknown check {args.check!r}; expected one of {', '.join(checks.CHECKS)}")
    result = repro(args.cell, args.check, args.dir or [Path("reports")], args.env_root)
    print(json.dumps(result.to_dict(), indent=1) if args.json else f"{args.cell} {result.check}: "
          f"{result.status.value} - {result.message}")
    return CHECK_FAILED if result.status.is_failure else DONE


def check_cell_id(cell_id: str) -> None:
    """An id names files and the environment directory that is cleared: only the ids a matrix makes
    (no path separator, no glob pattern, no leading dot) get that far."""
    if not CELL_ID_RE.match(cell_id):
        raise InputError(f"{cell_id!r} is not a cell id (letters, digits, '.', '_', '+' and '-'; see "
                         "`python -m harness matrix list FILE`)")


def find_cell(cell_id: str, search: list[Path]) -> Path:
    hits = [p for d in search for p in sorted(Path(d).glob(f"**/cells/{cell_id}.json"))]
    if not hits:
        raise InputError(f"no result for cell {cell_id!r} under {', '.join(map(str, search))}; pass --dir")
    if len({p.resolve() for p in hits}) > 1:
        raise InputError(f"cell {cell_id!r} has results in several places ({hits[0]}, {hits[1]}); pass --dir")
    return hits[0]


def repro(cell_id: str, check: str, search: list[Path], env_root: Path, timeout: float = 1800) -> CheckResult:
    check_cell_id(cell_id)
    path = find_cell(cell_id, search)
    try:
        cell = load_cell(path)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    report_dir = path.parent.parent
    if not cell.lock or not (report_dir / cell.lock).is_file():
        raise InputError(f"{path}: no lock file recorded for cell {cell_id} (its environment never installed)")
    work = env_root.parent / "repro" / cell_id
    # The lock was resolved on the cell's interpreter: rebuild on the same minor version.
    wanted = cell.axes.get("python") or ".".join(str(cell.environment.get("python", "")).split(".")[:2])
    try:
        python = interpreters.find(wanted).path if wanted else None
    except interpreters.InterpreterMissing as exc:
        raise EnvironmentMissing(str(exc)) from None
    env = cellenv.build_from_lock(cell_id, report_dir / cell.lock, env_root, work / "setup.log", python)
    args = ["--model", cell.axes.get("model", "text"), "--backend", cell.axes.get("backend", "fsdp"),
            "--mode", cell.axes.get("mode", "sync")]
    return runner.run_isolated(env.python, check, args, work / f"{check}.log", timeout,
                               env.run_env({"HARNESS_DEVICE": cell.axes.get("device", "cpu")}))
