"""Run one cell inside its container image (envs/container.py says what the container gets): start it
within the cell's time budget, read the cell file the run inside wrote, or record why there is none as an
infra error; on an interrupt, stop every container this process waits on.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from harness import checks
from harness.envs import container
from harness.envs.cellenv import tail
from harness.results import records
from harness.results.records import CellResult, CheckResult, Status, combine_checks, kept_results, load_cell

SETUP_BUDGET = 3600.0  # seconds for bootstrap and the cell's install, on top of the checks' own timeouts
TAIL_LINES = 200
_LIVE: set = set()  # containers this process waits on, for stop_all()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def run_cell(cell, matrix, opts, earlier: CellResult | None = None) -> CellResult:
    """Run the cell in its image; a failure of the engine, image or container becomes an infra error."""
    docker = container.sdk()
    import requests

    path, rel_log = records.cell_path(opts.out_dir, cell.id), f"cells/{cell.id}/logs/setup.log"
    before = path.stat().st_mtime_ns if path.exists() else None
    started, start = records.now(), time.perf_counter()
    image, code, output, reason = None, None, "", ""
    Path(opts.out_dir, rel_log).parent.mkdir(parents=True, exist_ok=True)
    (Path(opts.env_root) / "containers").mkdir(parents=True, exist_ok=True)
    try:
        try:
            client = docker.from_env(timeout=300)
        except docker.errors.DockerException as exc:
            where = os.environ.get("DOCKER_HOST") or "the default socket"
            raise docker.errors.DockerException(f"no docker engine reachable at {where}: {exc}") from None
        image = container.find_image(docker, client, cell.axes["image"])
        limit = budget(cell, matrix, opts)
        code, output = _run(docker, client, image, container.run_args(cell, matrix, opts, image), limit)
        if code is None:
            reason = f"the container ran past its limit of {limit:.0f} s and was stopped"
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    with open(Path(opts.out_dir) / rel_log, "a", encoding="utf-8") as log:
        log.write(f"\n== container for {cell.id}: image {cell.axes['image']} "
                  f"({image.id if image else 'unavailable'}), exit status {code}\n{reason}\n"
                  f"== container output (last {TAIL_LINES} lines)\n{output}\n")
    if not reason and code == 0 and path.exists() and path.stat().st_mtime_ns != before:
        try:
            return load_cell(path)
        except ValueError as exc:
            reason = str(exc)
    if not reason:
        reason = f"the container exited with status {code} without a cell result: " \
                 f"{tail(Path(opts.out_dir) / rel_log)[-2500:]}"
    result = CellResult(matrix.name, cell.id, dict(cell.axes), list(cell.tags), started=started, setup_log=rel_log,
                        environment={"image": cell.axes["image"], "image_id": image.id if image else None,
                                     "image_digest": image.digest if image else None,
                                     "install": cell.install_order()})
    wanted = opts.checks or cell.checks
    result.checks = combine_checks(wanted, kept_results(earlier, wanted, opts.redo), lambda name: CheckResult(
        name, Status.ERROR, f"container: {reason}", log=rel_log, failure_class="infra"))
    result.finished = records.now()
    result.duration = round(time.perf_counter() - start, 3)
    records.write_json_atomic(path, result.to_dict())
    return result


def budget(cell, matrix, opts) -> float:
    """Wall-time limit of the whole container: setup plus every check's timeout on every try."""
    names = opts.checks or cell.checks
    per = [opts.timeout or matrix.timeout or checks.CHECKS[n].timeout for n in names if n in checks.CHECKS]
    return SETUP_BUDGET + sum(per) * (opts.retries + 1)


def _run(docker, client, image: container.Image, kwargs: dict, limit: float) -> tuple[int | None, str]:
    """(exit status or None past the limit, output tail); the container is removed whatever happens."""
    import requests

    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(kwargs["name"]).remove(force=True)  # left by a run killed with SIGKILL
    box = client.containers.create(image.id, **kwargs)
    with _LIVE_LOCK:
        _LIVE.add(box)
    try:
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        box.start()
        try:
            code = box.wait(timeout=limit)["StatusCode"]
        except requests.exceptions.ReadTimeout:
            code = None
            box.stop(timeout=10)
        if _STOPPING.is_set():
            raise KeyboardInterrupt  # stopped by stop_all(): no result to record
        return code, box.logs(tail=TAIL_LINES).decode("utf-8", "replace")
    except BaseException:  # KeyboardInterrupt (and SIGTERM, which errors.exit_status turns into one) included
        with contextlib.suppress(Exception):
            box.stop(timeout=10)
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(box)
        with contextlib.suppress(Exception):
            box.remove(force=True)


def stop_all() -> None:
    """Stop and remove every container this process waits on, and start no more: an interrupted
    parallel run (the interrupt reaches only the main thread; workers wait on their containers)."""
    _STOPPING.set()
    with _LIVE_LOCK:
        boxes = list(_LIVE)
    for box in boxes:
        with contextlib.suppress(Exception):
            box.stop(timeout=10)
            box.remove(force=True)
