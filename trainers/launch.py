"""How both trainers start (`python -m trainers.fsdp`, `python -m trainers.megatron`).

Under torchrun every rank runs the trainer. Outside torchrun it runs as ONE process (a one-rank process
group), unless `--nproc-per-node N` (N > 1) asks for more: then it re-launches itself under
`python -m torch.distributed.run --standalone --nproc-per-node N`. Workers end with os._exit after the
process group is destroyed: an abort at interpreter exit was seen otherwise.
"""
from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ


def relaunch(module: str, argv: list[str], nproc: int) -> int:
    """Run `python -m module argv` on `nproc` ranks under torchrun; its exit status."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", module, *argv]
    return subprocess.call(command)


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
