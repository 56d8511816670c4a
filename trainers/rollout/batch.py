"""What every rollout engine hands the trainer: the batch, its rows, the engine protocol, and the padding,
seed and position helpers they share."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class RolloutBatch:
    """Prompts left-padded to `prompt_width`, then `max_new_tokens` response positions.

    input_ids, attention_mask: (B, prompt_width + R); response_mask, logprobs: (B, R).
    response_mask is 1 up to and including the first EOS, 0 after it (those positions hold
    the pad id); logprobs are 0 where response_mask is 0.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    prompt_lengths: list[int]
    prompt_width: int

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width:]

    def responses(self) -> list[list[int]]:
        """Each response's tokens up to its mask (EOS included)."""
        return [row[mask.bool()].tolist() for row, mask in zip(self.response_ids, self.response_mask)]


@dataclass
class EngineRow:
    """One response as an engine returned it: the prompt it ran (after the engine's own processing),
    the sampled tokens and their log-probs."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]


class Rollout(Protocol):
    def generate(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                 seed: int | Sequence[int]) -> RolloutBatch: ...

    def sync_weights(self, weights) -> None: ...

    def held_fingerprint(self) -> str: ...  # of the weights it holds now (trainers/rollout/fingerprint.py)

    def fingerprint_of(self, state: dict) -> str: ...  # what held_fingerprint would read once `state` is loaded

    def close(self) -> None: ...


def row_seeds(seed: int | Sequence[int], rows: int) -> list[int]:
    if isinstance(seed, int):
        return [seed * 100_003 + index for index in range(rows)]
    seeds = [int(s) for s in seed]
    if len(seeds) != rows:
        raise ValueError(f"{len(seeds)} seeds for {rows} prompts")
    return seeds


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompt_ids)
    # Padded in Python, then two tensors: one op each instead of a few per row (rows are short).
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompt_ids], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], dtype=torch.long)
    return ids.reshape(len(prompt_ids), width), mask.reshape(len(prompt_ids), width)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 at each row's first real token (left padding)."""
    return (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)


class RolloutMismatch(RuntimeError):
    """The rollout engine's cached decode loop and transformers' `generate` disagree."""
