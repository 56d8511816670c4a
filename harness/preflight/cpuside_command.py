"""`python -m harness cpu-side MATRIX`: the cells tagged `cpu-side` (or chosen by --cells / --tags) installed here
from their exact wheels, their checks that need no accelerator run on CPU, the results written to
DIR/cpu-side/, where `python -m harness report DIR` shows them (see cpuside.py)."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness import matrix
from harness.envs import pipconfig
from harness.errors import InputError
from harness.matrix import newest
from harness.results import sources
from harness.results.directories import directory_problem
from harness.results.records import Status

TAG = "cpu-side"  # the matrix tag of the cells to pre-flight on their exact wheels


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
    from . import cpuside  # the run's machinery, loaded only for this verb

    start = time.perf_counter()
    done = cpuside.run(m, cells, out, args.env_root)
    for result in done:
        counts = {s.value: sum(c.status is s for c in result.checks) for s in Status}
        print(f"{result.cell_id}  {result.environment.get('preflight')}: "
              + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    print(f"CPU pre-flight of {m.path.name}: {len(done)} cells in {time.perf_counter() - start:.0f} s; wrote "
          f"{out / sources.CPU_SIDE_FOLDER}", file=sys.stderr)
    return 0
