"""`python -m trainers.fsdp [flags]`: a short GRPO run on a tiny (or local) Qwen3.5 model.

Starting and relaunching under torchrun: trainers/launch.py.
"""
from __future__ import annotations

import os
import sys

from trainers import launch


def main(argv: list[str] | None = None) -> int:
    from .config import resolve

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config = resolve(argv)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if config.nproc_per_node > 1 and not launch.under_torchrun():
        return launch.relaunch("trainers.fsdp", argv, config.nproc_per_node)

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
    launch.exit_with(main)
