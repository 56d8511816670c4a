"""A stand-in for the `ray` module, enough for harness.execution.ray_dispatch's driver loop in one process: a task runs
when the driver collects it, in a directory it shares with the driver, and the first `lose` tries die as a lost
node does (after writing what a cell writes first: its lock, setup log and a check's log). `run_cell` stands in
for a cell's run: it takes `seconds` by its own record, however long the driver waited."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.results.records import CellResult, CheckResult, Status, now, write_text_atomic


class RayError(Exception):
    pass


class RayTaskError(RayError):
    pass


class TaskCancelledError(RayError):
    pass


class NodeDiedError(RayError):
    pass


class _Died(Exception):
    """The try's node went away mid-cell."""


class _Ref:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args


class FakeRay:
    exceptions = SimpleNamespace(RayError=RayError, RayTaskError=RayTaskError, TaskCancelledError=TaskCancelledError,
                                 NodeDiedError=NodeDiedError)

    def __init__(self, lose: int = 0, seconds: float = 10.0):
        self.lose, self.seconds, self.tries = lose, seconds, 0

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict:
        return {"CPU": 4.0}

    def remote(self, fn):
        class Task:
            def options(self, **_options):
                return self

            def remote(self, *args):
                return _Ref(fn, args)

        return Task()

    def wait(self, refs: list, num_returns: int = 1) -> tuple[list, list]:
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        self.tries += 1
        try:
            return ref.fn(*ref.args)
        except _Died:
            raise NodeDiedError(f"the node running try {self.tries} died (10.0.0.{self.tries})") from None

    def cancel(self, ref, force: bool = False) -> None:
        pass

    def run_cell(self, cell, matrix, opts, earlier=None) -> CellResult:
        """What a cell writes as it runs, then its record; or, on a try to lose, its death after the first check
        started."""
        rel = Path("cells") / cell.id
        write_text_atomic(opts.out_dir / rel / "lock.txt", "torch==2.13.0\n")
        write_text_atomic(opts.out_dir / rel / "logs" / "setup.log", "$ uv venv\n")
        write_text_atomic(opts.out_dir / rel / "logs" / f"{cell.checks[0]}.log", "started\n")
        if self.tries <= self.lose:
            raise _Died
        result = CellResult(matrix.name, cell.id, dict(cell.axes), list(cell.tags), started=now(),
                            lock=str(rel / "lock.txt"), setup_log=str(rel / "logs" / "setup.log"))
        result.checks = [CheckResult(name, Status.PASS, "fine", log=str(rel / "logs" / f"{name}.log"))
                         for name in cell.checks]
        result.finished, result.duration = now(), self.seconds
        return result
