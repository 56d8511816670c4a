"""`python -m harness cpu-side MATRIX`, the CPU pre-flight on a cell's exact wheels: an accelerator cell installed
here as its runner installs it (its pins and install recipe, from the package index: the CUDA builds of torch and
vLLM), then the checks that need no accelerator run in that environment with the device forced to cpu. The cells
are those tagged `cpu-side`, or those --cells / --tags choose.

Which checks run is the registry's data (harness.checks.CheckSpec): `needs_accelerator` False runs the whole
check, a `cpu_part` runs only that part (patch-parity's target audit), every other check is marked as awaiting a
runner and never started. Each result is marked (harness/results/sources.py) and written to DIR/cpu-side/, which
the report shows for a cell until a runner's result in DIR/cells/ replaces it.

Two things differ from the runner, both said in the row's origin line: pip's find-links of this machine (a local
CPU build of torch) are not used, so the index's own wheels are installed; and a source release that builds CUDA
kernels (SKIP_KERNEL_BUILDS) is built without them, as no CUDA toolkit is here. This machine's pip constraint
still applies: where it rules a cell out, the row says "not installable on this runner" and names it.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness import checks, matrix
from harness.envs import cellenv, interpreters, pipconfig
from harness.errors import InputError
from harness.matrix import Cell, Matrix, newest
from harness.results import install_verdict, sources
from harness.results.directories import directory_problem
from harness.results.records import CellResult, CheckResult, Status, cell_path, load_cell, now, write_json_atomic

from .resolve import INSTALLS
from .store import RUNNER_WORDS

TAG = "cpu-side"  # the matrix tag of the cells to pre-flight on their exact wheels

# Source releases whose build compiles CUDA kernels, and the variables that build them without (their setup
# scripts' own switches); the Python side stays, as on the runner.
SKIP_KERNEL_BUILDS = {"causal-conv1d": (("CAUSAL_CONV1D_FORCE_BUILD", "TRUE"),
                                        ("CAUSAL_CONV1D_SKIP_CUDA_BUILD", "TRUE"))}
# Every check process of the run: no accelerator is seen even on a machine that has one. A CUDA build of vLLM
# finds no platform without a GPU (its DeviceConfig then refuses: "Failed to infer device type"), so its own
# switch names the CPU platform (vllm/platforms/__init__.py, cpu_platform_plugin); the chat rendering and tool
# parsing the checks call are the same code on every platform.
CHECK_ENV = {checks.PART_VARIABLE: checks.NO_ACCELERATOR, "CUDA_VISIBLE_DEVICES": "", "ASCEND_RT_VISIBLE_DEVICES": "",
             "VLLM_TARGET_DEVICE": "cpu"}


@dataclass(frozen=True)
class CpuSideEnv(cellenv.CellEnv):
    # execution/cell.py records it as the row's origin line (the result's environment["origin"])
    origin: str = ""


def plan(cell: Cell) -> dict[str, str | None]:
    """Check -> sources.RAN (run whole), PART (its cpu_part only) or AWAITS (never run here); None where the
    check does not apply to the cell's backend."""
    planned: dict[str, str | None] = {}
    for name in cell.checks:
        spec = checks.CHECKS[name]
        if cell.axes["backend"] not in spec.backends:
            planned[name] = None
        elif not spec.needs_accelerator:
            planned[name] = sources.RAN
        else:
            planned[name] = sources.PART if spec.cpu_part else sources.AWAITS
    return planned


def to_run(planned: dict[str, str | None]) -> tuple[str, ...]:
    return tuple(name for name, mark in planned.items() if mark in (sources.RAN, sources.PART))


def kernel_builds(cell: Cell) -> dict[str, str]:
    """The build variables of the cell's pins that build CUDA kernels (SKIP_KERNEL_BUILDS)."""
    names = {canonicalize_name(Requirement(pin).name): pin for pin in cell.requirements}
    return {variable: value for name, pairs in SKIP_KERNEL_BUILDS.items() if name in names
            for variable, value in pairs}


def runner_uv_env(cell: Cell) -> dict[str, str]:
    """uv's environment for installing the cell as its runner does: without pip's find-links of this machine (pip's
    configuration and PIP_FIND_LINKS, where the nox session names those it forwarded to uv: they hold local builds,
    such as a CPU torch, that are not the runner's wheels); find-links set for uv alone and this machine's pip
    constraint stay."""
    env = {**cellenv.uv_process_env(), **kernel_builds(cell)}
    local = {*pipconfig.pip_config().get("find-links", "").split(), *os.environ.get("PIP_FIND_LINKS", "").split()}
    links = [link for link in env.get("UV_FIND_LINKS", "").split(",") if link and link not in local]
    env.pop("PIP_FIND_LINKS", None)
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)
    else:
        env.pop("UV_FIND_LINKS", None)
    return env


def origin_line(cell: Cell, date: str) -> str:
    """Where the row's results come from, for the report: what ran here, what awaits a runner, what differs."""
    planned = plan(cell)
    ran = [n for n, m in planned.items() if m == sources.RAN]
    part = [f"{n} ({checks.CHECKS[n].cpu_part})" for n, m in planned.items() if m == sources.PART]
    awaiting = [n for n, m in planned.items() if m == sources.AWAITS]
    runner = RUNNER_WORDS.get(cell.axes["device"], "runner")
    names = {canonicalize_name(Requirement(p).name) for p in cell.requirements}
    built = sorted(name for name in SKIP_KERNEL_BUILDS if name in names)
    vllm = sorted(name for name in names if name == "vllm" or name.startswith("vllm-"))
    return (f"CPU pre-flight on {date} on the cell's exact wheels from the index, device forced to cpu: "
            f"{', '.join(ran + part) or 'no check'} ran here; {', '.join(awaiting) or 'no check'} await a {runner}"
            + (f"; built without their CUDA kernels: {', '.join(built)}" if built else "")
            + (f"; {', '.join(vllm)} on its CPU platform (VLLM_TARGET_DEVICE=cpu)" if vllm else ""))


def preparer(env_root: Path, date: str):
    """run.py's `prepare`: the cell's environment built by its own recipe with the runner's index settings."""
    def prepare(cell: Cell, log: Path) -> tuple[cellenv.CellEnv, str]:
        try:
            python = interpreters.find(cell.python).path if cell.python else None
        except interpreters.InterpreterMissing as exc:  # this machine lacks it: no verdict, said as such
            raise cellenv.SetupFailed(str(exc)) from None
        env = cellenv.build(cell.id, cell.requirements, env_root, log, python, cell.install.from_index,
                            cell.install.remove, cell.install.from_source, cell.install.build_env,
                            tuple(cell.install.overrides()), uv_env=runner_uv_env(cell))
        return CpuSideEnv(env.path, origin_line(cell, date)), cellenv.freeze(env)
    return prepare


def on_cpu(cell: Cell) -> Cell:
    """The cell as the run sees it: device cpu (HARNESS_DEVICE and the determinism settings follow it)."""
    return replace(cell, axes={**cell.axes, "device": "cpu"})


def _under(folder: str, link: str | None) -> str | None:
    return f"{folder}/{link}" if link and not link.startswith(f"{folder}/") else link


def mark(result: CellResult, cell: Cell) -> CellResult:
    """A run's result as the CPU pre-flight's: the accelerator cell's axes, each check marked, the checks that
    need an accelerator added as awaiting a runner, links relative to DIR (the run wrote them under DIR/cpu-side)."""
    planned = plan(cell)
    runner = RUNNER_WORDS.get(cell.axes["device"], "runner")
    ran = {check.check: check for check in result.checks}
    marked = []
    for name in cell.checks:
        mark_of = planned[name]
        check = ran.get(name)
        if mark_of is None:
            check = check or CheckResult(name, Status.SKIP, f"not applicable to backend {cell.axes['backend']}")
        elif mark_of == sources.AWAITS or check is None:
            check = CheckResult(name, Status.SKIP, f"awaits a {runner}: it needs the accelerator, so the CPU "
                                f"pre-flight does not run it", metrics={sources.CPU_SIDE_KEY: sources.AWAITS})
        else:
            check.metrics = {**check.metrics, sources.CPU_SIDE_KEY: mark_of}
            check.log = _under(sources.CPU_SIDE_FOLDER, check.log)
        marked.append(check)
    result.checks = marked
    result.axes, result.tags = dict(cell.axes), list(cell.tags)
    result.lock = _under(sources.CPU_SIDE_FOLDER, result.lock)
    result.setup_log = _under(sources.CPU_SIDE_FOLDER, result.setup_log)
    installs = [found for found in map(install_verdict.of_check, marked) if found is not None]
    result.environment[sources.CPU_SIDE_KEY] = True
    result.environment["preflight"] = installs[0].label if installs else INSTALLS
    result.environment.setdefault("origin", origin_line(cell, (result.finished or result.started)[:10]))
    return result


def run(m: Matrix, cells: list[Cell], out: Path, env_root: Path, prepare=None) -> list[CellResult]:
    """Install each cell here from its exact wheels, run its checks that need no accelerator on CPU, and write
    the marked results to out/cpu-side/cells/. `prepare`: run.py's hook (tests give their own)."""
    from harness.execution.cell import RunOptions  # the run's machinery, loaded only for this verb
    from harness.execution.jobs import Progress
    from harness.execution.run import run_matrix

    folder = Path(out) / sources.CPU_SIDE_FOLDER
    date = dt.date.today().isoformat()
    progress = Progress(len(cells))
    done = []
    for cell in cells:
        wanted = to_run(plan(cell))
        opts = RunOptions(out_dir=folder, env_root=env_root, checks=wanted, reuse=False, redo=True, progress=progress,
                          extra_env=dict(CHECK_ENV), prepare=prepare or preparer(env_root, date))
        shutil.rmtree(folder / "cells" / cell.id, ignore_errors=True)  # an earlier run's logs are not this one's
        if wanted:
            run_matrix(m, [on_cpu(cell)], opts)
            result = load_cell(cell_path(folder, cell.id))
        else:  # every check needs an accelerator: each awaits a runner
            stamp = now()
            result = CellResult(m.name, cell.id, dict(cell.axes), list(cell.tags), started=stamp, finished=stamp)
        result = mark(result, cell)
        write_json_atomic(cell_path(folder, cell.id), result.to_dict())
        done.append(result)
    return done


def add_parser(sub) -> None:
    cs = sub.add_parser("cpu-side", help="install accelerator cells here from their exact wheels and run the checks "
                                         "that need no accelerator on CPU")
    cs.add_argument("file", type=Path)
    cs.add_argument("--cells", nargs="+", default=None, metavar="ID")
    cs.add_argument("--tags", nargs="+", default=None, metavar="TAG", help=f"default: {TAG}")
    cs.add_argument("--out", type=Path, default=None, help="results directory (default: reports/<matrix name>)")
    cs.add_argument("--env-root", type=Path, default=Path(".harness/cpu-side-envs"),
                    help="where the cells' environments are kept (default .harness/cpu-side-envs)")


def _cells(m, args) -> list:
    tags = args.tags if args.tags or args.cells else [TAG]
    cells = m.select(args.cells, tags)  # an unknown tag or cell id is the matrix's one-line error
    for cell in cells:
        if cell.axes.get("device", "cpu") == "cpu":
            raise InputError(f"{m.path.name}: cell {cell.id} is a CPU cell; the CPU pre-flight is for accelerator "
                             f"cells (run it with `python -m harness run`)")
        if cell.axes.get("image"):
            raise InputError(f"{m.path.name}: cell {cell.id} runs in the image {cell.axes['image']}; the CPU "
                             f"pre-flight installs cells with uv only")
    return cells


def cmd_cpu_side(args) -> int:
    m = matrix.load(args.file)
    cells = _cells(m, args)
    out = args.out or Path("reports") / m.name
    for option, path in (("--out", out), ("--env-root", args.env_root)):
        problem = directory_problem(option, path)
        if problem:
            raise InputError(problem)
    # `newest` and the like, resolved for the runner, as the pre-flight does.
    cells = newest.resolve_cells(m, cells, newest.Resolver(limits={}))
    # This machine's pip constraint, where set, binds the install here: the install verdict names it (run.py).
    os.environ.update({k: v for k, v in pipconfig.uv_environment().items() if k == "UV_CONSTRAINT"})
    start = time.perf_counter()
    done = run(m, cells, out, args.env_root)
    for result in done:
        counts = {s.value: sum(c.status is s for c in result.checks) for s in Status}
        print(f"{result.cell_id}  {result.environment.get('preflight')}: "
              + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    print(f"CPU pre-flight of {m.path.name}: {len(done)} cells in {time.perf_counter() - start:.0f} s; wrote "
          f"{out / sources.CPU_SIDE_FOLDER}", file=sys.stderr)
    return 0
