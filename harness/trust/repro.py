"""One command per cell and check that rebuilds the cell's exact environment from its recorded
lock and reruns the check: `python -m harness repro CELL_ID --check NAME`."""
from __future__ import annotations

from pathlib import Path
from shlex import quote

from harness.envs import cellenv, interpreters
from harness.errors import EnvironmentMissing, InputError
from harness.execution import runner
from harness.matrix.axes import CELL_ID_RE
from harness.results.records import CheckResult, load_cell


def command(cell_id: str, check: str, results_dir: str | None = None) -> str:
    """The repro command the report shows for one entry (quoted for a POSIX shell, as shlex.join would)."""
    # Only the two words from the results need quoting; shlex.quote returns a plain word unchanged after one
    # search (the report builds tens of thousands of these commands).
    text = f"python -m harness repro {quote(cell_id)} --check {quote(check)}"
    return f"{text} --dir {quote(results_dir)}" if results_dir else text


def cpu_side_command(matrix: str, cell_id: str) -> str:
    """What reruns a verdict of the CPU pre-flight on a cell's exact wheels: that pre-flight again, for the cell
    (the same install and the same CPU-only settings), not `repro`, which would run the check on its device."""
    return f"python -m harness cpu-side {quote(f'matrices/{matrix}.toml')} --cells {quote(cell_id)}"


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
