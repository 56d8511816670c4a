"""Run a matrix on a Ray cluster: one Ray task per cell, results collected by the driver.

`python -m harness run FILE --ray ADDRESS` sends each cell that the plain runner would run (the
same reuse rule, `run.reusable`) as a Ray task asking for the cell's device (`num_gpus=1` for
cuda, the `NPU` resource for npu, which is also the name Ray gives Ascend NPUs it detects). The
task runs `cell.run_cell` on a worker and returns the cell's record; the driver writes it into
its own results directory, so the JSON always ends up there whatever the worker could write.

Code: workers import this project from the driver's checkout path (PYTHONPATH in the tasks'
runtime_env), as the cells' checks already do (cellenv puts PROJECT_ROOT on their PYTHONPATH).
We rely on that shared path rather than a working_dir upload: an upload lands in a per-hash
directory on each node, which would move PROJECT_ROOT, and the workers need this project's
Python with ray anyway, so a cluster built from one image or one shared checkout is assumed.

Files: the driver writes a random token into the results directory. A worker that reads the
same token shares the directory (one machine, or a shared filesystem) and writes logs and lock
there; a worker that does not runs the cell in a scratch directory and returns the lock and the
tails of the logs with the result, which the driver writes where they are missing.

A worker or node that dies is not retried by Ray: the driver sends the cell again (up to the run's --retries),
and each lost try is recorded on the checks the cell then ran (`attempts`, as the local runner records a check
tried again). When it still fails, the cell is written as `crash` with failure class `infra`, the reason, and the
lock, setup log and start time its last try left in a shared directory: never lost. The progress line times a
cell by its own record, not from when its task was sent.
"""
from __future__ import annotations

import contextlib
import json
import platform
import re
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from harness.envs.cellenv import PROJECT_ROOT
from harness.errors import EnvironmentMissing, InputError
from harness.matrix import Cell, Matrix
from harness.results.records import (
    CellResult,
    CheckResult,
    Status,
    cell_path,
    combine_checks,
    kept_results,
    now,
    write_json_atomic,
    write_text_atomic,
)

from .cell import RunOptions, run_cell
from .jobs import Progress
from .run import reusable, write_run_info

RUN_TOKEN = ".ray-run-token"
ATTEMPT = ".ray-attempt.json"  # in cells/<id>/ of a shared directory: when and where the cell's try started
CLOCK_SLACK_S = 2.0  # a file's time on a shared filesystem may lag the worker's clock a little
LOG_TAIL_BYTES = 64 * 1024  # per shipped log: enough to see why, small enough for the object store
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
_ADDRESS = re.compile(rf"^(?:ray://)?{_HOST}:(\d{{1,5}})$")
DEVICE_RESOURCES = {"cuda": "GPU", "npu": "NPU"}


def validate_address(address: str) -> str:
    """`local`, `auto`, `host:port` or `ray://host:port`; anything else is an InputError (exit 2)."""
    if address in ("local", "auto"):
        return address
    match = _ADDRESS.match(address)
    if not match or not 0 < int(match.group(1)) < 65536:
        raise InputError(f"--ray: {address!r} is not a Ray address; expected local, auto, host:port or ray://host:port")
    return address


def import_ray():
    """The ray module, or EnvironmentMissing (exit 3) saying how to get it."""
    try:
        import ray
    except ImportError:
        raise EnvironmentMissing("--ray needs Ray on the driver and the workers: `pip install ray`") from None
    return ray


def task_options(cell: Cell) -> dict:
    """Ray task options for one cell: its device as a resource request. Ray itself retries nothing: the driver
    sends a task again after a lost worker or node (`_collect`), so that each try is recorded."""
    options: dict = {"num_cpus": 1, "max_retries": 0, "retry_exceptions": False, "name": f"harness:{cell.id}"}
    device = cell.axes["device"]
    if device == "cuda":
        options["num_gpus"] = 1
    elif device == "npu":
        options["resources"] = {"NPU": 1}
    return options


def worker_env() -> dict[str, str]:
    """Variables the tasks need: the project importable, and the harness's own settings
    (HARNESS_EXTRA_CHECKS registers checks at import, so it must be set in the worker)."""
    import os

    env = {k: v for k, v in os.environ.items() if k.startswith("HARNESS_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def collect_files(out_dir: Path, result: CellResult) -> dict[str, str]:
    """The cell's lock (whole) and logs (tails), keyed by their path relative to `out_dir`."""
    files = {}
    for rel in [result.lock, result.setup_log, *(c.log for c in result.checks)]:
        path = out_dir / rel if rel else None
        if path is None or not path.is_file():
            continue
        data = path.read_bytes()
        if rel != result.lock and len(data) > LOG_TAIL_BYTES:
            data = b"[... cut by the Ray dispatcher: only the tail was shipped]\n" + data[-LOG_TAIL_BYTES:]
        files[rel] = data.decode("utf-8", errors="replace")
    return files


def land_files(out_dir: Path, files: dict[str, str]) -> list[Path]:
    """Write shipped files that the driver's directory lacks; a path leaving `out_dir` is ignored."""
    written = []
    for rel, text in files.items():
        relative = Path(rel)
        if relative.is_absolute() or ".." in relative.parts:
            continue
        dest = out_dir / relative
        if not dest.exists():
            write_text_atomic(dest, text)
            written.append(dest)
    return written


def execute_cell(cell: Cell, matrix: Matrix, opts: RunOptions, earlier: CellResult | None, token: str) -> dict:
    """The task body, on a worker: run the cell and return its record (and its files if unshared). In a shared
    directory the try first says when and where it started (ATTEMPT), which outlives a node that dies."""
    marker = opts.out_dir / RUN_TOKEN
    shared = marker.is_file() and marker.read_text().strip() == token
    if shared:
        write_json_atomic(opts.out_dir / "cells" / cell.id / ATTEMPT,
                          {"started": now(), "epoch": time.time(), "node": platform.node()})
        return {"cell": run_cell(cell, matrix, opts, earlier).to_dict(), "files": {}}
    scratch = Path(tempfile.mkdtemp(prefix=f"harness-{cell.id[:40]}-"))
    try:
        result = run_cell(cell, matrix, replace(opts, out_dir=scratch), earlier)
        return {"cell": result.to_dict(), "files": collect_files(scratch, result)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def left_behind(out_dir: Path, cell: Cell) -> dict:
    """What a try that died left in a shared directory: when and on which node it started, and the lock, setup log
    and checks' logs it wrote since (older ones are an earlier run's); {} where it left nothing (a node that did not
    share the directory)."""
    rel = Path("cells") / cell.id
    try:
        start = json.loads((out_dir / rel / ATTEMPT).read_text(encoding="utf-8"))
        epoch = float(start["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    found: dict = {"started": str(start.get("started", "")), "epoch": epoch, "node": str(start.get("node", "")),
                   "logs": {}}
    written = [rel / "lock.txt", *sorted(p.relative_to(out_dir) for p in (out_dir / rel / "logs").glob("*.log"))]
    for path in written:
        try:
            if (out_dir / path).stat().st_mtime < epoch - CLOCK_SLACK_S:
                continue
        except OSError:
            continue
        if path.name == "lock.txt":
            found["lock"] = str(path)
        elif path.name == "setup.log":
            found["setup_log"] = str(path)
        else:  # a check's log: the check it was running, or one it ran before
            found["logs"][path.stem] = str(path)
    return found


def crash_result(cell: Cell, matrix: Matrix, opts: RunOptions, earlier: CellResult | None, reason: str,
                 attempts: list[dict] | None = None, left: dict | None = None) -> CellResult:
    """The record of a cell whose task failed for good: its wanted checks `crash`, class infra, with the earlier
    tries (`attempts`) and what the last one left in the shared directory (`left_behind`)."""
    wanted, left = opts.checks or cell.checks, left or {}
    where = f" on node {left['node']}" if left.get("node") else ""
    message = f"the Ray task running this cell failed{where} after {len(attempts or [])} retries: {reason[-1500:]}"
    result = CellResult(matrix.name, cell.id, dict(cell.axes), list(cell.tags),
                        environment={"install": cell.install_order()}, lock=left.get("lock"),
                        setup_log=left.get("setup_log"), started=left.get("started", ""), finished=now())
    if "epoch" in left:
        result.duration = round(max(time.time() - left["epoch"], 0.0), 3)
    result.checks = combine_checks(wanted, kept_results(earlier, wanted, opts.redo),
                                   lambda name: CheckResult(name, Status.CRASH, message, failure_class="infra",
                                                            log=left.get("logs", {}).get(name),
                                                            attempts=list(attempts or [])))
    return result


def with_attempts(result: CellResult, attempts: list[dict], ran: set[str]) -> CellResult:
    """The earlier tries of a cell that Ray ran again, on each check this try ran (`ran`), as the local runner
    records a check tried again: its attempts, and flaky when it then passed."""
    for check in result.checks:
        if check.check in ran:
            check.attempts = [*attempts, *check.attempts]
            check.flaky = bool(check.attempts) and not check.status.is_failure
    return result


@contextlib.contextmanager
def connect(ray, address: str):
    """Connect to (or, for `local`, start) a cluster; an existing connection is used as it is."""
    if ray.is_initialized():
        yield
        return
    try:
        ray.init(address=address, include_dashboard=False) if address == "local" else ray.init(address=address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EnvironmentMissing(f"cannot reach a Ray cluster at {address!r} ({str(exc).splitlines()[0][:300]}); "
                                 "`--ray local` starts one on this machine") from None
    try:
        yield
    finally:
        ray.shutdown()


def _warn_missing_resources(ray, cells: list[Cell]) -> None:
    offered = ray.cluster_resources()
    for device in sorted({c.axes["device"] for c in cells} & set(DEVICE_RESOURCES)):
        if not offered.get(DEVICE_RESOURCES[device]):
            print(f"warning: no node of the Ray cluster offers {DEVICE_RESOURCES[device]}: the {device} cells wait "
                  "until one joins (an autoscaler may add it; Ctrl-C stops the run)", file=sys.stderr)


def run_on_ray(matrix: Matrix, cells: list[Cell], opts: RunOptions, address: str) -> list[CellResult]:
    """Like run.run_matrix, with the cells run as Ray tasks; Ctrl-C cancels the tasks not done."""
    ray = import_ray()
    progress = opts.progress or Progress(len(cells))
    # Workers do not share the driver's working directory; the progress bar stays on the driver.
    opts = replace(opts, out_dir=opts.out_dir.resolve(), env_root=opts.env_root.resolve(), progress=None)
    write_run_info(matrix, opts)
    token = uuid.uuid4().hex
    write_text_atomic(opts.out_dir / RUN_TOKEN, token)
    results: dict[str, CellResult] = {}
    with connect(ray, address):
        _warn_missing_resources(ray, cells)
        task = ray.remote(execute_cell)
        runtime_env = {"env_vars": worker_env()}

        def submit(cell: Cell, earlier: CellResult | None):
            return task.options(runtime_env=runtime_env, **task_options(cell)).remote(cell, matrix, opts, earlier,
                                                                                     token)
        pending = {}
        for cell in cells:
            earlier, complete = reusable(cell, opts)
            progress.started(cell.id, reused=complete)
            if complete:
                results[cell.id] = earlier
                progress.finished(cell.id, [c.status for c in earlier.checks])
                continue
            pending[submit(cell, earlier)] = (cell, earlier, [])
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    cell, earlier, attempts = pending.pop(ref)
                    done = _collect(ray, ref, cell, matrix, opts, earlier, attempts)
                    if done is None:  # a lost worker or node, with tries left: the cell is sent again
                        pending[submit(cell, earlier)] = (cell, earlier, attempts)
                        continue
                    results[cell.id] = done
                    # the cell's own time: a task may wait for a node long before it starts
                    progress.finished(cell.id, [c.status for c in done.checks], seconds=done.duration or None)
        except BaseException:  # Ctrl-C or SIGTERM: stop the rest; the cells already written stay
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    return [results[c.id] for c in cells]


def _lost(ray, exc: Exception) -> bool:
    """A worker or node lost (tried again), not the task's own exception or a cancel (never tried again)."""
    return not isinstance(exc, (ray.exceptions.RayTaskError, ray.exceptions.TaskCancelledError))


def _collect(ray, ref, cell: Cell, matrix: Matrix, opts: RunOptions, earlier: CellResult | None,
             attempts: list[dict]) -> CellResult | None:
    """The cell's record, written into the driver's directory; None when its try was lost and it goes again
    (the try added to `attempts`)."""
    marker = opts.out_dir / "cells" / cell.id / ATTEMPT
    try:
        payload = ray.get(ref)
    except ray.exceptions.RayError as exc:  # the worker or its node died, or the task itself raised
        reason, left = f"{type(exc).__name__}: {exc}", left_behind(opts.out_dir, cell)
        if _lost(ray, exc) and len(attempts) < opts.retries:
            where = f" on node {left['node']}" if left.get("node") else ""
            attempts.append({"status": Status.CRASH.value, "failure_class": "infra",
                             "reason": f"the Ray task running this cell was lost{where}: {reason[-1500:]}"})
            print(f"{cell.id}: its Ray task was lost{where} ({type(exc).__name__}); sending it again (retry "
                  f"{len(attempts)} of {opts.retries})", file=sys.stderr)
            return None
        result = crash_result(cell, matrix, opts, earlier, reason, attempts, left)
        write_json_atomic(cell_path(opts.out_dir, cell.id), result.to_dict())
        marker.unlink(missing_ok=True)
        return result
    land_files(opts.out_dir, payload["files"])
    record = payload["cell"]
    if attempts:
        wanted = opts.checks or cell.checks
        ran = set(wanted) - set(kept_results(earlier, wanted, opts.redo))
        record = with_attempts(CellResult.from_dict(record), attempts, ran).to_dict()
    write_json_atomic(cell_path(opts.out_dir, cell.id), record)
    marker.unlink(missing_ok=True)
    return CellResult.from_dict(record)
