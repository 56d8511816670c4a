"""Fully-async GRPO: rollout keeps generating while the trainer updates, with bounded staleness.

Drives either trainer (FSDP2 or Megatron-core) through the GRPO loop they share
(trainers/grpo/loop.py) only: `rollout_step(step)`, `update(batch, advantages)`, `export_weights()`
(the state the engine takes), `backend_record(step)`, `rollout` (the engine), `loss_config`,
`config`, `patches` (when the backend has a patch set).

- samples: a bounded queue of rollout batches, each tagged with the weight version that made it;
- weights: a versioned publisher; the producer loads a version into its engine in its own thread,
  so the trainer never stops for a weight sync;
- producer: the rollout thread (its engine is a separate copy of the policy: a Hugging Face model,
  or a vLLM engine that is already its own process);
- busy: when rollout and update were busy, and how much they overlapped;
- patch_agreement: the producers' applied patches must equal the trainer's, checked at start-up;
- driver: the loop, and the staleness rule.

`python -m trainers.fsdp --mode fully-async --staleness K` (and trainers.megatron) select it.
"""
from __future__ import annotations

MODES = ("sync", "fully-async")


def option_problems(mode: str, staleness: int, tis_cap: float) -> list[str]:
    """What is wrong with the fully-async options (both trainers' configs call this)."""
    problems = []
    if mode not in MODES:
        problems.append(f"mode={mode!r} (expected one of {', '.join(MODES)})")
    if not staleness >= 0:
        problems.append("staleness must be >= 0 (weight versions a sample may lag the trainer)")
    if not tis_cap > 0:  # NaN too
        problems.append("tis_cap must be > 0 (the truncation of the importance weight)")
    return problems
