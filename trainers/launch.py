"""How both trainers start (`python -m trainers.fsdp`, `python -m trainers.megatron`).

Under torchrun every rank runs the trainer. Outside torchrun it runs as ONE process (a one-rank process
group), unless `--nproc-per-node N` (N > 1) asks for more: then it re-launches itself under
`python -m torch.distributed.run --standalone --nproc-per-node N`. Workers end with os._exit after the
process group is destroyed: an abort at interpreter exit was seen otherwise.

`main` is the one place that turns what stops a trainer into one line and an exit status
(trainers/errors.py): 2 for bad input (options, `--config` and `--model-config` files, a model config that
does not fit the model, a rollout engine that is not installed, a layout this stack refuses), 3 for what
this stack cannot run, 4 for a run stopped at a non-finite loss or gradient norm. Anything else is a bug:
a traceback and 1.

A relaunch keeps that contract: torchrun itself ends with 1 whatever its workers' statuses were, and every
rank meets the same bad input. So each rank that stops on a TrainerError leaves its line and status in a
folder the launcher names (`STATUS_DIR_ENV`), and the launcher prints the line once (each distinct line with
its rank where the ranks disagree) and exits with the status of the lowest such rank.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from trainers.errors import TrainerError


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ


STATUS_DIR_ENV = "TRAINERS_RANK_STATUS_DIR"  # set by `relaunch` for its workers only


def relaunch(module: str, argv: list[str], nproc: int) -> int:
    """Run `python -m module argv` on `nproc` ranks under torchrun; the ranks' own exit status where one
    stopped on a TrainerError (its line printed once), else torchrun's."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", module, *argv]
    with tempfile.TemporaryDirectory(prefix="trainer-ranks-") as folder:
        code = subprocess.call(command, env={**os.environ, STATUS_DIR_ENV: folder})
        stopped = rank_statuses(Path(folder))
    if not stopped:
        return code
    lines = {entry["line"] for entry in stopped}
    for entry in stopped if len(lines) > 1 else stopped[:1]:
        where = f" (rank {entry['rank']})" if len(lines) > 1 else ""
        print(f"error{where}: {entry['line']}", file=sys.stderr, flush=True)
    return stopped[0]["code"]


def rank_statuses(folder: Path) -> list[dict]:
    """The ranks that left a status in `folder`, lowest rank first; a file that is not one is ignored."""
    found = []
    for path in folder.glob("rank-*.json"):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("rank"), int) and isinstance(entry.get("code"), int) \
                and isinstance(entry.get("line"), str):
            found.append(entry)
    return sorted(found, key=lambda entry: entry["rank"])


def report_stop(exc: TrainerError) -> None:
    """The one line of a TrainerError: to the launcher's folder under a relaunch, else to stderr."""
    folder = os.environ.get(STATUS_DIR_ENV) if under_torchrun() else None
    if folder and Path(folder).is_dir():
        rank = int(os.environ.get("RANK", 0))
        entry = {"rank": rank, "code": exc.exit_code, "line": str(exc)}
        Path(folder, f"rank-{rank}.json").write_text(json.dumps(entry), encoding="utf-8")
        return
    print(f"error: {exc}", file=sys.stderr, flush=True)


def main(module: str, argv: list[str] | None, resolve: Callable, train: Callable,
         summary: Callable[[object, list[dict]], str]) -> int:
    """Resolve the options, relaunch under torchrun when asked, train; a TrainerError is one line and its status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = resolve(argv)
        if config.nproc_per_node > 1 and not under_torchrun():
            return relaunch(module, argv, config.nproc_per_node)
        records = train(config)
    except TrainerError as exc:
        report_stop(exc)
        return exc.exit_code
    if records and int(os.environ.get("RANK", 0)) == 0:
        print(summary(config, records), flush=True)
    return 0


def exit_with(main: Callable[[], int]) -> NoReturn:
    """Run `main` and leave with its status through os._exit, output flushed, a traceback on any error."""
    code = 1
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
