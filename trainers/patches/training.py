"""The patches a trainer applies, chosen in one place from the device and the installed versions.

Every trainer run applies:
- the position-embedding device fix (transformers 5.2-5.8): a vision-language run under FSDP2
  CPU offload fails without it;
- the rotary-buffer device fixes (transformers 5.2-5.8, trainers.patches.offload_device): the text
  and vision rotary embeddings combine their `inv_freq` buffer with device compute unmoved;
- the fused log-prob / entropy forward: the trainer's log-probs go through it, so a full
  vocabulary of float32 logits never exists for every position at once;
- the Gated DeltaNet chunk fitted to short sequences, and its one-token decode step in fewer ops,
  where flash-linear-attention is absent;
- the Gated DeltaNet causal conv (training, prefill and decode) as shifted multiply-adds, where
  causal-conv1d is absent.
On NPU it adds the torch_npu op patches (RMSNorm, gated RMSNorm, rotary, SwiGLU MLP).

The packed (remove-padding) forward is not applied: these trainers pad their batches; the
packed path is checked on its own by patch-parity. A patch that does not apply here (its
target is gone, or its version range excludes the installed release) is listed with the
reason, never silently dropped, and the trainer's log says which patches it ran with.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .base import NotApplicable, Patch

# Patch-name prefixes per device type; "all" applies everywhere.
SELECTION = {
    "all": ("pos-embed-device:", "offload-device:", "fused-logprob:", "gated-delta-chunk:", "gated-delta-step:",
            "causal-conv1d"),
    "npu": ("npu-",),
}


def selected(device_type: str) -> list[Patch]:
    """The patch objects a trainer on `device_type` wants, applicable here or not."""
    from . import all_patches

    prefixes = SELECTION["all"] + SELECTION.get(device_type, ())
    return [patch for patch in all_patches() if patch.name.startswith(prefixes)]


@dataclass
class TrainingPatches:
    """What a trainer applied (and will remove) and what it could not apply, with the reasons."""

    applied: list[Patch] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [patch.name for patch in self.applied]

    def remove(self) -> None:
        while self.applied:
            self.applied.pop().remove()

    def summary(self) -> str:
        return (f"patches applied: {', '.join(self.names) or 'none'}; not applicable: "
                f"{len(self.not_applicable)} ({', '.join(sorted(self.not_applicable)) or 'none'})")


def apply_for(device_type: str) -> TrainingPatches:
    """Apply the trainer's patch set for `device_type`. Must run before the model is built: some
    targets (the Gated DeltaNet rule and conv in 5.2-5.9) are bound to each layer when it is built.

    Patches that someone else already applied are left to them (and not removed by `remove`).
    """
    result = TrainingPatches()
    for patch in selected(device_type):
        if patch.applied:
            continue
        try:
            patch.apply()
        except NotApplicable as exc:
            result.not_applicable[patch.name] = str(exc)
            continue
        result.applied.append(patch)
    return result
