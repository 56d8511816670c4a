"""The trainer and its rollout producers must run with the same patch set, checked at start-up.

verl #5583 moved where an engine's patches were applied and they silently stopped applying in
the workers (fixed by #6012): training ran, with different numerics on the two sides. Here each
producer reports the patches in effect where it generates, and a difference stops the run before
the first step with one line naming it.
"""
from __future__ import annotations

from trainers.errors import TrainerError


class PatchMismatch(TrainerError, RuntimeError):
    """The trainer and a rollout producer disagree on the applied patches: the run's input is wrong; exit 2."""

    exit_code = 2


def patches_in_effect(device_type: str) -> list[str]:
    """The trainer's patch selection for `device_type` that is applied in this process, now."""
    from ..patches import training

    return sorted(patch.name for patch in training.selected(device_type) if patch.applied)


def intended_patches(trainer_patches, device_type: str) -> list[str]:
    """The trainer's side: every patch of its selection that applies here (`trainer_patches` is its
    TrainingPatches; one applied earlier by someone else in this process counts too; None: a trainer
    without a patch set)."""
    if trainer_patches is None:
        return []
    from ..patches import training

    return sorted(patch.name for patch in training.selected(device_type)
                  if patch.name not in trainer_patches.not_applicable)


def check_agreement(trainer_patches: list[str], producers: dict[str, list[str]]) -> None:
    """Raise PatchMismatch (one line) when any producer's patches differ from the trainer's."""
    expected = set(trainer_patches)
    for name, applied in sorted(producers.items()):
        missing, extra = sorted(expected - set(applied)), sorted(set(applied) - expected)
        if missing or extra:
            parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
                [f"has {', '.join(extra)} the trainer does not"] if extra else [])
            raise PatchMismatch(f"patch mismatch: rollout producer {name} {'; '.join(parts)} "
                                f"(trainer applied: {', '.join(sorted(expected)) or 'none'})")
