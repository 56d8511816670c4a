"""What each forward call of an embedding saw under real FSDP2: its input devices and its weight's.

Under FSDP2 with `CPUOffloadPolicy` a module that is its own FSDP unit keeps its parameters as
host shards between calls; FSDP2's forward pre-hook gathers them onto the compute device. The
recorder's hook is appended, so it runs after FSDP2's own (prepended) pre-hook: it sees the weight
the kernel will use, and callers detect the position-embedding bug by behaviour (an index that is
not on the weight's device), not by the text of an error.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class ModuleCall:
    """The devices one forward call of a module saw, after the weight was put in place."""

    input_devices: list[str]
    weight_device: str
    weight_kind: str  # the weight's class: Parameter, or DTensor under FSDP2

    @property
    def mismatch(self) -> bool:
        return any(device != self.weight_device for device in self.input_devices)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mismatch": self.mismatch}


@contextlib.contextmanager
def record_embedding_calls(module: nn.Module) -> Iterator[list[ModuleCall]]:
    """Record the input and weight devices of every forward call of `module`."""
    calls: list[ModuleCall] = []

    def record(mod: nn.Module, args: tuple) -> None:
        weight = mod.weight
        devices = [str(a.device) for a in args if isinstance(a, torch.Tensor)]
        calls.append(ModuleCall(devices, str(weight.device), type(weight).__name__))

    handle = module.register_forward_pre_hook(record)
    try:
        yield calls
    finally:
        handle.remove()
