"""`python -m harness preflight MATRIX`: every cell's install verdict and lock, resolved on this machine for the
runner's platform and Python, written where the report shows them until a runner's result replaces them.

Recent resolutions are kept, so a second pre-flight of a matrix costs no resolver call (`Cache`). They are keyed
by everything the answer depends on: the pins, the source builds, the target, uv's version and the index
settings uv sees. An entry is used for `max_age_s` (the unpinned dependencies of a lock move with new releases);
unanswered resolutions are never kept.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from harness import matrix
from harness.envs import cellenv, pipconfig
from harness.errors import EnvironmentMissing, InputError
from harness.matrix import index, newest
from harness.matrix.axes import PYTHON_RE
from harness.results.directories import directory_problem
from harness.results.records import write_json_atomic

from . import store
from .resolve import (
    ALL,
    METHOD,
    UNKNOWN,
    Resolution,
    Target,
    cell_pins,
    compile_lock,
    counted,
    resolve,
    target_for,
    unrequired,
)

DEFAULT_MAX_AGE_S = 12 * 3600.0


def add_parser(sub) -> None:
    pf = sub.add_parser("preflight", help="resolve each cell's lock for its runner on this machine (no downloads) "
                                          "and record its install verdict")
    pf.add_argument("file", type=Path)
    pf.add_argument("--cells", nargs="+", default=None, metavar="ID")
    pf.add_argument("--tags", nargs="+", default=None, metavar="TAG")
    pf.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    pf.add_argument("--out", type=Path, default=None, help="results directory (default: reports/<matrix name>)")
    pf.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="the Python of cells that name none, by axis, [matrix] python or image (default: this one)")
    pf.add_argument("--cache", type=Path, default=Path(".harness/preflight-cache"), help="where answers are kept")
    pf.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE_S / 3600, metavar="HOURS",
                    help="use a kept answer up to this old (default 12)")
    pf.add_argument("--no-cache", action="store_true", help="ask the resolver for every cell")
    pf.add_argument("--jobs", type=int, default=4, help="resolver calls at once (default 4)")


def _check_args(args) -> None:
    if not PYTHON_RE.match(args.python):
        raise InputError(f"--python: expected a Python version like 3.11, got {args.python!r}")
    if not 1 <= args.jobs <= 32:
        raise InputError(f"--jobs: expected a whole number from 1 to 32, got {args.jobs}")
    if not 0 < args.max_age <= 24 * 365:
        raise InputError(f"--max-age: expected hours above 0, got {args.max_age:g}")


def cmd_preflight(args) -> int:
    _check_args(args)
    m = matrix.load(args.file)
    out = args.out or Path("reports") / m.name
    for option, path in (("--out", out), ("--cache", None if args.no_cache else args.cache)):
        problem = path and directory_problem(option, path)
        if problem:
            raise InputError(problem)
    # `newest` and the like, resolved for the runner: this machine's own pip constraints do not bind it.
    cells = newest.resolve_cells(m, m.select(args.cells, args.tags), newest.Resolver(limits={}))
    check_releases(m, cells)
    start = time.perf_counter()
    answers = Resolver(None if args.no_cache else args.cache, args.max_age * 3600, m.path)
    planned = [(cell, target_for(cell, args.python)) for cell in cells]
    # Cells that differ only in model or backend share their pins: one resolver call each.
    unique = {answers.key(cell, target): (cell, target) for cell, target in planned}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        found = dict(zip(unique, pool.map(lambda pair: answers.resolve(*pair), unique.values())))
    done = [(cell, target, found[answers.key(cell, target)]) for cell, target in planned]
    summary = store.write(out, m.name, done)
    seconds = time.perf_counter() - start
    if args.json:
        print(json.dumps([{"cell": c.id, "platform": t.platform, "python": t.python, **r.to_dict()}
                          for c, t, r in done], indent=1))
    else:
        for cell, _, resolution in done:
            print(f"{cell.id}  {resolution.verdict}: {resolution.reason}")
    counts = {v: sum(r.verdict == v for _, _, r in done) for v in ALL}
    print(f"pre-flight of {m.path.name}: {len(cells)} cells ({len(unique)} distinct pin sets, {answers.calls} "
          f"resolved, the rest from the cache) in {seconds:.1f} s: "
          + ", ".join(counted(v, n) for v, n in counts.items() if n) + f"; wrote {summary}", file=sys.stderr)
    return 0


def check_releases(m: matrix.Matrix, cells: list[matrix.Cell]) -> None:
    """A release the cells pin that the index does not have is bad input (exit 2, as `run` says it), not a cell
    that cannot be installed together. An index that does not answer leaves it to the resolver (its cells are
    "pre-flight failed")."""
    try:
        index.check_cells(cells, m.locate)
    except EnvironmentMissing as exc:
        print(f"warning: the pinned releases were not checked: {str(exc).split('; ')[0]}", file=sys.stderr)


def uv_version() -> str:
    done = subprocess.run([cellenv.uv_binary(), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


def key(requirements: list[str], from_source: tuple[str, ...], target: Target, uv: str) -> str:
    settings = {name: value for name, value in sorted({**os.environ, **pipconfig.uv_environment()}.items())
                if name.startswith("UV_") and ("INDEX" in name or "FIND_LINKS" in name or "CONSTRAINT" in name)}
    text = json.dumps([sorted(requirements), sorted(from_source), target.platform, target.python, uv, settings, METHOD])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class Cache:
    def __init__(self, directory: Path | None, max_age_s: float = DEFAULT_MAX_AGE_S):
        self.directory, self.max_age_s = directory, max_age_s

    def get(self, name: str) -> Resolution | None:
        if self.directory is None:
            return None
        path = self.directory / f"{name}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if time.time() - float(data["stored"]) > self.max_age_s:
                return None
            return Resolution.from_dict(data["resolution"])
        except (OSError, ValueError, KeyError, TypeError):  # absent or unreadable: resolve again
            return None

    def put(self, name: str, resolution: Resolution) -> None:
        if self.directory is None or resolution.verdict == UNKNOWN:
            return
        write_json_atomic(self.directory / f"{name}.json", {"stored": time.time(), "resolution": resolution.to_dict()})


class Resolver:
    """The resolver behind the answer cache, counting its calls."""

    def __init__(self, directory: Path | None, max_age_s: float, matrix_path: Path | None = None):
        self.store = Cache(directory, max_age_s)
        self.matrix_path = matrix_path  # named in what is refused
        self.uv = uv_version()
        self.calls = 0
        self.source_only: set[str] = set()  # pins found to be source releases, shared by the run's cells

    def key(self, cell, target) -> str:
        # An excluded distribution is a never-true override line: part of what is resolved, so of the key.
        return key(cell_pins(cell) + cell.install.overrides(), cell.install.from_source, target, self.uv)

    def resolve(self, cell, target) -> Resolution:
        name = self.key(cell, target)
        kept = self.store.get(name)
        if kept is not None:
            return kept
        self.calls += 1
        resolution = resolve(cell_pins(cell), cell.install.from_source, target,
                             compile=partial(compile_lock, overrides=tuple(cell.install.overrides())),
                             source_only=self.source_only)
        if resolution.lock and cell.install.exclude:  # resolved: each excluded name must be something it requires
            self.calls += len(cell.install.exclude)
            resolved = [r for r in cell_pins(cell) if r not in resolution.built]
            for excluded in unrequired(resolved, cell.install.exclude, target):
                raise InputError(f"{self.matrix_path}: {cell.id}: install.exclude: {excluded!r} is required by none "
                                 "of the row's packages (its name misspelt, or left over); the row resolves without "
                                 "excluding it")
        self.store.put(name, resolution)
        return resolution

