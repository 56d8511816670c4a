"""Verifiable toy tasks for GRPO on tiny models: token-id prompts in, a reward in [0, 1] out.

A task must be learnable from a *random* tiny model by GRPO alone in a few dozen steps, start
well below the convergence threshold, and be deterministic for a seed (prompts come from a
`random.Random`, never from torch's global generator). Rewards give partial credit per
response token, so every group has some spread for GRPO to normalise.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# Token ids 0, 1, 2 are pad, bos and eos in the zoo; ids from 120 up are the VL model's
# special tokens. Tasks draw from the ids in between so one task works on every model kind.
FIRST_ID = 3
LAST_ID = 119


class Task(Protocol):
    name: str

    def prompts(self, batch: int, rng: random.Random) -> list[list[int]]: ...

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float: ...


def _token_classes(num_classes: int) -> list[range]:
    width = (LAST_ID - FIRST_ID + 1) // num_classes
    return [range(FIRST_ID + c * width, FIRST_ID + (c + 1) * width) for c in range(num_classes)]


@dataclass(frozen=True)
class MatchClassTask:
    """The prompt is `prompt_len` tokens of one class (a contiguous id range, one of
    `num_classes`); each response token earns credit when it belongs to the same class.

    A random policy scores about (ids per class) / vocab, ~0.23 with the zoo's 128 ids and 4
    classes. Emitting one fixed class cannot beat 1/num_classes on average, so a reward above
    that means the policy reads its prompt.
    """

    name: str = "match-class"
    num_classes: int = 4
    prompt_len: int = 6
    response_len: int = 8  # credit is per token of this length; early EOS forfeits the rest

    def _class_of(self, token: int) -> int | None:
        for index, ids in enumerate(_token_classes(self.num_classes)):
            if token in ids:
                return index
        return None

    def prompts(self, batch: int, rng: random.Random) -> list[list[int]]:
        classes = _token_classes(self.num_classes)
        out = []
        for _ in range(batch):
            ids = classes[rng.randrange(self.num_classes)]
            out.append([rng.choice(ids) for _ in range(self.prompt_len)])
        return out

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float:
        target = self._class_of(prompt[0])
        hits = sum(1 for token in response[: self.response_len] if self._class_of(token) == target)
        return hits / self.response_len


@dataclass(frozen=True)
class CopyTask:
    """Each response token earns credit when it occurs in the prompt (`prompt_len` distinct
    ids). Needs attention to the prompt rather than a class bias: harder than match-class."""

    name: str = "copy"
    prompt_len: int = 24
    response_len: int = 8

    def prompts(self, batch: int, rng: random.Random) -> list[list[int]]:
        ids = list(range(FIRST_ID, LAST_ID + 1))
        return [rng.sample(ids, self.prompt_len) for _ in range(batch)]

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float:
        allowed = set(prompt)
        return sum(1 for token in response[: self.response_len] if token in allowed) / self.response_len


@dataclass(frozen=True)
class TargetSetTask:
    """Each response token earns credit when it lies in one fixed id range (the prompt is noise).
    The easiest task: a policy only has to shift its output distribution."""

    name: str = "target-set"
    num_classes: int = 4  # the target range is the first of this many classes
    prompt_len: int = 6
    response_len: int = 8

    def prompts(self, batch: int, rng: random.Random) -> list[list[int]]:
        return [[rng.randint(FIRST_ID, LAST_ID) for _ in range(self.prompt_len)] for _ in range(batch)]

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float:
        target = _token_classes(self.num_classes)[0]
        return sum(1 for token in response[: self.response_len] if token in target) / self.response_len


@dataclass(frozen=True)
class MarkerClassTask(MatchClassTask):
    """match-class with an easy cue: the prompt repeats one marker id per class (3, 4, 5, 6)."""

    name: str = "marker-class"

    def prompts(self, batch: int, rng: random.Random) -> list[list[int]]:
        return [[FIRST_ID + rng.randrange(self.num_classes)] * self.prompt_len for _ in range(batch)]

    def reward(self, prompt: Sequence[int], response: Sequence[int]) -> float:
        target = _token_classes(self.num_classes)[prompt[0] - FIRST_ID]
        return sum(1 for token in response[: self.response_len] if token in target) / self.response_len


TASKS = {"match-class": MatchClassTask, "marker-class": MarkerClassTask, "target-set": TargetSetTask,
         "copy": CopyTask}


def make_task(name: str = "match-class", **kwargs) -> Task:
    try:
        return TASKS[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}") from None


def vocab_fits(task: Task, vocab_size: int) -> bool:
    """True when the model can emit every id the task rewards."""
    return vocab_size > LAST_ID
