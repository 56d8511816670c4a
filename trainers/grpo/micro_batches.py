"""The GRPO update's mini- and micro-batches, cut through `trainers.grpo.data.chunk_tensordict`.

As verl's actors do with padding removed, a rank's batch becomes a TensorDict whose token ids and
position ids are jagged NestedTensors (each row's real tokens only: its prompt and its response up
to EOS), next to dense per-row tensors (advantages, prompt lengths) and per-response-token tensors
(response mask, the engine's log-probs, the old and reference log-probs). The update splits that
TensorDict into mini-batches (one optimizer step each) and each mini-batch into micro-batches (one
forward and backward each, gradients accumulated), both with chunk_tensordict; each micro-batch is
padded back to the rollout layout (prompts left-padded to the batch's prompt width, responses
right-padded to its response width), so a row's forward is the same whatever micro-batch holds it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers.grpo import data
from trainers.rollout import RolloutBatch

PER_TOKEN = ("response_mask", "logprobs", "old_logprobs", "ref_logprobs")  # (B, R) each, when present


@dataclass
class MicroBatch:
    batch: RolloutBatch
    advantages: torch.Tensor  # (rows,)
    old_logprobs: torch.Tensor | None
    ref_logprobs: torch.Tensor | None


@dataclass(frozen=True)
class Layout:
    """What padding a chunk back needs: the whole batch's widths and pad id."""

    prompt_width: int
    width: int
    pad_id: int

    @classmethod
    def of(cls, batch: RolloutBatch) -> Layout:
        padding = batch.input_ids[batch.attention_mask == 0]
        return cls(batch.prompt_width, int(batch.input_ids.shape[1]), int(padding[0]) if padding.numel() else 0)


def as_tensordict(batch: RolloutBatch, advantages: torch.Tensor, old_logprobs: torch.Tensor | None = None,
                  ref_logprobs: torch.Tensor | None = None):
    """The batch without padding: jagged input_ids and position_ids, dense everything else."""
    keep = batch.attention_mask.bool()
    tokens = [row[mask] for row, mask in zip(batch.input_ids, keep)]
    positions = [torch.arange(len(row), device=row.device) for row in tokens]
    dense = {"advantages": advantages, "prompt_lengths": torch.tensor(batch.prompt_lengths, device=advantages.device)}
    per_token = {"response_mask": batch.response_mask, "logprobs": batch.logprobs, "old_logprobs": old_logprobs,
                 "ref_logprobs": ref_logprobs}
    dense.update({key: value for key, value in per_token.items() if value is not None})
    return data.build_batch({"input_ids": tokens, "position_ids": positions}, dense)


def padded(td, layout: Layout) -> MicroBatch:
    """A chunk back in the rollout layout: [pad] * (prompt_width - prompt) + real tokens + [pad] * rest."""
    tokens = data.nested_samples(td.get("input_ids"))
    prompt_lengths = [int(n) for n in td.get("prompt_lengths").tolist()]
    input_ids = torch.full((len(tokens), layout.width), layout.pad_id, dtype=tokens[0].dtype, device=tokens[0].device)
    mask = torch.zeros_like(input_ids)
    for row, (sample, prompt) in enumerate(zip(tokens, prompt_lengths)):
        start = layout.prompt_width - prompt
        input_ids[row, start:start + len(sample)] = sample
        mask[row, start:start + len(sample)] = 1
    batch = RolloutBatch(input_ids, mask, td.get("response_mask"), td.get("logprobs"), prompt_lengths,
                         layout.prompt_width)
    optional = {key: td.get(key) if key in td.keys() else None for key in ("old_logprobs", "ref_logprobs")}
    return MicroBatch(batch, td.get("advantages"), optional["old_logprobs"], optional["ref_logprobs"])


def split(batch: RolloutBatch, advantages: torch.Tensor, mini_batches: int, micro_batches: int,
          old_logprobs: torch.Tensor | None = None,
          ref_logprobs: torch.Tensor | None = None) -> list[list[MicroBatch]]:
    """`mini_batches` lists of `micro_batches` micro-batches each, in row order."""
    layout = Layout.of(batch)
    td = as_tensordict(batch, advantages, old_logprobs, ref_logprobs)
    return [[padded(micro, layout) for micro in data.chunk_tensordict(mini, micro_batches)]
            for mini in data.chunk_tensordict(td, mini_batches)]


def record(parts: list[list[MicroBatch]]) -> dict:
    """For a step's metrics line: that the update micro-batched through chunk_tensordict, and how."""
    chunker = data.chunk_tensordict
    return {"micro_batched_by": f"{chunker.__module__}.{chunker.__qualname__}", "mini_batch_count": len(parts),
            "micro_batches": len(parts[0]), "micro_batch_rows": [len(m.batch.prompt_lengths) for m in parts[0]]}
