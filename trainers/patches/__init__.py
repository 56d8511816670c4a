"""The Qwen3.5 patch set. Each module lists its `Patch` objects in a module-level `PATCHES`.

Modules are imported lazily so that a missing optional package (torch_npu, vLLM) only
affects the patches that need it.
"""
from __future__ import annotations

import importlib

from .base import NotApplicable, Patch, TargetMissing

# Every module of the patch set that defines monkey patches of upstream symbols.
PATCH_MODULES = (
    "trainers.patches.pos_embed",
    "trainers.patches.offload_device",
    "trainers.patches.fused_logprob",
    "trainers.patches.packed_forward",
    "trainers.patches.gated_delta_chunk",
    "trainers.patches.causal_conv",
    "trainers.patches.gated_delta_step",
    "trainers.patches.npu_ops",
    "trainers.patches.chat_template",
)


def all_patches() -> list[Patch]:
    patches: list[Patch] = []
    for name in PATCH_MODULES:
        patches.extend(importlib.import_module(name).PATCHES)
    return patches


__all__ = ["NotApplicable", "Patch", "TargetMissing", "PATCH_MODULES", "all_patches"]
