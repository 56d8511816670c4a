"""`python -m trainers.fsdp [flags]`: a short GRPO run on a tiny (or local) Qwen3.5 model.

Under torchrun every rank runs the trainer. Outside torchrun it runs as ONE process (a
one-rank process group), unless `--nproc-per-node N` (N > 1) asks for more: then it re-launches
itself under `python -m torch.distributed.run --standalone --nproc-per-node N`.
Workers end with os._exit after the process group is destroyed: an abort at interpreter exit
was seen otherwise.
"""
from __future__ import annotations

import os
import subprocess
import sys
import traceback


def _relaunch(argv: list[str], nproc: int) -> int:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", "trainers.fsdp", *argv]
    return subprocess.call(command)


def main(argv: list[str] | None = None) -> int:
    from .config import resolve

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = resolve(argv)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.nproc_per_node > 1 and "LOCAL_RANK" not in os.environ:
        return _relaunch(argv, config.nproc_per_node)

    from ..fully_async.patch_agreement import PatchMismatch
    from .train import run

    try:
        records = run(config)
    except PatchMismatch as exc:  # trainer and rollout producer run different patches: stop at start-up
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if records and int(os.environ.get("RANK", 0)) == 0:
        first, last = records[0], records[-1]
        print(f"GRPO {config.model}: {len(records)} steps, reward {first['reward_mean']:.3f} -> "
              f"{last['reward_mean']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
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
