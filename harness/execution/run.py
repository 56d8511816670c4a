"""Run a matrix's cells into its results directory: one run per directory at a time (`results_lock`), run.json
for the report, each cell already finished there kept, and the others run (cell.run_cell) one after the
other or several at once, in start order (jobs.StartQueue), each holding its share of the run's budget, with
their progress.

A finished cell file is reused by the next run of the same matrix unless `redo` is set.

The lock: two runs writing one directory would each rewrite a cell's file from what they read before the
other wrote (one run's results lost) and write the same logs. A run holds an exclusive lock on
`DIR/.run.lock` for its whole length; a second run on the same directory stops at once (exit 7), naming the
holder. The lock is the kernel's (flock): a killed run releases it with its last breath, so there is never a
stale lock to remove by hand; the temporary files of a write it was killed in are removed by the next run to
take the lock (records.sweep_stale_temporaries). Runs one after the other merge per check: each keeps the
other's results (records.kept_results).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

from harness.envs import container, devices
from harness.errors import ResultsBusy
from harness.matrix import Cell, Matrix
from harness.results.records import (
    CellResult,
    cell_path,
    kept_results,
    load_cell,
    sweep_stale_temporaries,
    write_json_atomic,
)

from . import container_cell, runner
from .ahead import InstallsAhead
from .cell import RunOptions, install_environment, install_key, reapply_known_failures, run_cell, settle_install
from .jobs import Progress, StartQueue, cell_cost, start_order
from .reuse import ReuseIndex

LOCK_NAME = ".run.lock"


@contextmanager
def results_lock(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise ResultsBusy(f"{out_dir}: another run (pid {holder}) is writing results here; wait for it to "
                              "finish, or pass another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        sweep_stale_temporaries(out_dir)  # what a run killed mid-write left; no run writes here but this one
        yield
    finally:
        os.close(fd)  # closing releases the lock


def run_matrix(matrix: Matrix, cells: list[Cell], opts: RunOptions) -> list[CellResult]:
    write_run_info(matrix, opts)
    if opts.reuse and opts.reuse_index is None:  # one index for the run: a cell reuses what finished before it
        opts = replace(opts, reuse_index=ReuseIndex(opts.out_dir, from_disk=not opts.redo))
    if any(container.wanted(cell) for cell in cells):
        container.sdk()  # a missing docker SDK stops the run (exit 3) before any cell, not halfway
    progress = opts.progress or Progress(len(cells))
    runner.STOPPING.clear()
    with installs_ahead(cells if opts.jobs <= 1 else start_order(cells), opts) as installs:
        return _run_cells(matrix, cells, replace(opts, installs=installs), progress)


def _run_cells(matrix: Matrix, cells: list[Cell], opts: RunOptions, progress: Progress) -> list[CellResult]:
    def one(cell: Cell, imported=None) -> CellResult:
        earlier, complete = reusable(cell, opts)
        if complete:
            progress.started(cell.id, reused=True)
            done = earlier
        else:
            with opts.budget.hold(cell_cost(cell)) if opts.budget else nullcontext([]) as held:
                progress.started(cell.id)  # running from now: its time in the progress line is its own
                done = run_cell(cell, matrix, replace(with_devices(opts, cell, held), imported=imported), earlier)
        progress.finished(cell.id, [c.status for c in done.checks])
        return done

    if opts.jobs <= 1:
        return [one(cell) for cell in cells]
    return _in_parallel(cells, opts, one)


def installs_ahead(cells: list[Cell], opts: RunOptions):
    """The environments of `cells` (in start order) installed ahead of them (ahead.py): those that will be
    installed here, not those kept whole, run in a container, or prepared on the interpreter at hand."""
    if opts.prepare is not None or opts.installs is not None:
        return nullcontext(opts.installs)
    wanted = [cell for cell in to_run(cells, opts.out_dir, opts.checks, opts.redo) if not container.wanted(cell)]
    return InstallsAhead(wanted, lambda cell: install_environment(cell, opts), ahead=max(1, opts.jobs),
                         settle=settle_install)


def _in_parallel(cells: list[Cell], opts: RunOptions, one) -> list[CellResult]:
    starts = StartQueue(cells)

    def worker() -> dict[str, CellResult]:
        done = {}
        try:
            while (cell := starts.take()) is not None:
                try:
                    done[cell.id] = one(cell, imported=lambda cell=cell: starts.imported(cell))
                finally:
                    starts.ended(cell)
        except BaseException:
            starts.close()  # the other workers start no more cells
            raise
        return done

    with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
        try:
            workers = [pool.submit(worker) for _ in range(opts.jobs)]
            finished, _ = wait(workers, return_when=FIRST_EXCEPTION)
            raised = next((w.exception() for w in finished if w.exception() is not None), None)
            if raised is not None:
                raise raised
            done = {cell_id: result for w in workers for cell_id, result in w.result().items()}
            return [done[cell.id] for cell in cells]  # in the matrix's order, whatever order they started in
        except BaseException:  # interrupted: workers wait on checks and containers the signal cannot reach
            starts.close()
            pool.shutdown(wait=False, cancel_futures=True)
            runner.stop_all()
            container_cell.stop_all()
            raise


def write_run_info(matrix: Matrix, opts: RunOptions) -> None:
    """run.json: what the report needs to know about the matrix (title, file, notes)."""
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(opts.out_dir / "run.json", {
        "matrix": matrix.name, "title": matrix.description, "matrix_file": matrix.path.name,
        "notes": [{"text": n.text, "cells": n.cells} for n in matrix.notes]})


def to_run(cells: list[Cell], out_dir: Path, checks: tuple[str, ...], redo: bool) -> list[Cell]:
    """The cells a run would run, not keep: those whose earlier result lacks a wanted check (`reusable`'s test,
    without rewriting anything)."""
    return [cell for cell in cells if not _complete(previous_result(out_dir, cell), cell, checks, redo)]


def _complete(earlier: CellResult | None, cell: Cell, checks: tuple[str, ...], redo: bool) -> bool:
    wanted = checks or cell.checks
    return earlier is not None and set(wanted) <= set(kept_results(earlier, wanted, redo, install_key(cell)))


def reusable(cell: Cell, opts: RunOptions) -> tuple[CellResult | None, bool]:
    """(earlier result, complete): a complete cell already holds every wanted check and is reused, not run.

    Shared by the local runner and the Ray dispatcher so that both skip the same cells. A reused
    cell's file is rewritten when the matrix's known failures for it changed since it ran.
    """
    earlier = previous_result(opts.out_dir, cell)
    complete = _complete(earlier, cell, opts.checks, opts.redo)
    if complete and reapply_known_failures(earlier, cell):
        write_json_atomic(cell_path(opts.out_dir, cell.id), earlier.to_dict())
    return earlier, complete


def previous_result(out_dir: Path, cell: Cell) -> CellResult | None:
    """This cell's earlier result file, if readable and made with the same pins."""
    path = cell_path(out_dir, cell.id)
    if not path.exists():
        return None
    try:
        done = load_cell(path)
    except ValueError:
        return None  # corrupt or from an older schema: run it again
    return done if done.axes == cell.axes else None


def with_devices(opts: RunOptions, cell: Cell, held: list[str]) -> RunOptions:
    """The options of a cell that holds accelerator devices: its checks see only those."""
    if not held:
        return opts
    variable = devices.VISIBLE_VARIABLE[cell.axes["device"]]
    return replace(opts, extra_env={**opts.extra_env, variable: ",".join(held)})
