"""`python -m trainers.megatron [flags]`: a short GRPO run of a Qwen3.5 text model on megatron-core.

Same command line and config style as `python -m trainers.fsdp`, plus `--tp/--pp/--cp/--ep`,
`--model` (text or moe), `--variant` (hybrid or full-attention) and the batch layout flags (packed layouts are refused).
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
        return launch.relaunch("trainers.megatron", argv, config.nproc_per_node)

    from ..fully_async.patch_agreement import PatchMismatch
    from .config import PackedBatchesRefused
    from .model import VariantUnavailable
    from .train import run

    try:
        records = run(config)
    except PackedBatchesRefused as exc:  # bad input for this stack: decided by probing megatron-core
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except VariantUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except PatchMismatch as exc:  # trainer and rollout producer run different patches: stop at start-up
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if records and int(os.environ.get("RANK", 0)) == 0:
        first, last = records[0], records[-1]
        print(f"GRPO megatron {config.variant} tp={config.tp}: {len(records)} steps, reward "
              f"{first['reward_mean']:.3f} -> {last['reward_mean']:.3f} (bridge {last.get('bridge', 'n/a')})",
              flush=True)
    return 0


if __name__ == "__main__":
    launch.exit_with(main)
