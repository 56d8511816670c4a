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
"""
from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from trainers.errors import TrainerError


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ


def relaunch(module: str, argv: list[str], nproc: int) -> int:
    """Run `python -m module argv` on `nproc` ranks under torchrun; its exit status."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", module, *argv]
    return subprocess.call(command)


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
        print(f"error: {exc}", file=sys.stderr, flush=True)
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
