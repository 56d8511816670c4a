"""Emulate FSDP2 CPU offload of one module on any machine, including a CPU-only one.

Under FSDP2 with `CPUOffloadPolicy`, a module that is its own FSDP unit keeps its parameters
as CPU shards between calls; FSDP2's forward pre-hook gathers them onto the compute device,
and its post-hook frees them again. Code that reads `module.weight.device` from outside the
module's forward therefore sees the CPU, not the compute device. On a CPU-only machine the CPU
*is* the compute device, so real offload cannot show that difference. This emulation keeps
the weight on the `meta` device between calls instead (a device that is never the compute
device) and swaps the real tensor in only inside the module's own forward, as FSDP2 does.

One addition is needed to make the mismatch visible: torch's CPU embedding kernel does not
check that its index is on the weight's device. With a `meta` index it returned uninitialised
memory instead of raising (torch 2.13), where the CUDA and NPU kernels raise a device-mismatch
error. So the emulation enforces that rule itself and raises `EmulatedDeviceMismatch`.

`record_embedding_calls` records the devices of each call of a module (also under real FSDP2),
so that callers detect the bug by behaviour, not by the text of an error.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

STORAGE_DEVICE = "meta"


class EmulatedDeviceMismatch(RuntimeError):
    """An input of the offloaded module was not on the device its weight is computed on."""


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


def _tensor_devices(args: tuple) -> list[str]:
    return [str(a.device) for a in args if isinstance(a, torch.Tensor)]


def _describe(module: nn.Module, args: tuple) -> ModuleCall:
    weight = module.weight
    return ModuleCall(_tensor_devices(args), str(weight.device), type(weight).__name__)


@contextlib.contextmanager
def record_embedding_calls(module: nn.Module) -> Iterator[list[ModuleCall]]:
    """Record the input and weight devices of every forward call of `module`.

    The hook is appended, so it runs after FSDP2's own (prepended) pre-hook has unsharded the
    weight: it sees the weight the kernel will use.
    """
    calls: list[ModuleCall] = []

    def record(mod: nn.Module, args: tuple) -> None:
        calls.append(_describe(mod, args))

    handle = module.register_forward_pre_hook(record)
    try:
        yield calls
    finally:
        handle.remove()


@dataclass
class OffloadEmulation:
    """State of one `emulate_cpu_offload` context: the real weight and what each call saw."""

    module: nn.Module
    real: nn.Parameter
    placeholder: nn.Parameter
    calls: list[ModuleCall] = field(default_factory=list)

    @property
    def mismatches(self) -> list[ModuleCall]:
        return [c for c in self.calls if c.mismatch]

    def _unshard(self, module: nn.Module, args: tuple) -> None:
        module._parameters["weight"] = self.real
        call = _describe(module, args)
        self.calls.append(call)
        if call.mismatch:
            # Put the placeholder back first: the module must look offloaded after a failed call too.
            module._parameters["weight"] = self.placeholder
            raise EmulatedDeviceMismatch(
                f"{type(module).__name__} input on {call.input_devices}, weight on {call.weight_device} "
                "(emulated FSDP2 CPU offload)")

    def _reshard(self, module: nn.Module, args: tuple, output: Any) -> None:
        module._parameters["weight"] = self.placeholder


@contextlib.contextmanager
def emulate_cpu_offload(module: nn.Module) -> Iterator[OffloadEmulation]:
    """Keep `module.weight` on the meta device except inside `module`'s own forward.

    Gradients still reach the real parameter: autograd holds the tensor used in forward, not
    the module attribute. On exit the module is restored exactly: the same Parameter object,
    no hooks left behind.
    """
    real = module._parameters.get("weight")
    if not isinstance(real, nn.Parameter):
        raise TypeError(f"{type(module).__name__} has no `weight` parameter to offload")
    if real.device.type == STORAGE_DEVICE:
        raise ValueError("the weight is already on the meta device: nested or unfinished emulation")
    placeholder = nn.Parameter(torch.empty_like(real, device=STORAGE_DEVICE), requires_grad=real.requires_grad)
    state = OffloadEmulation(module, real, placeholder)
    # Prepended like FSDP2's own hooks, so that other pre-hooks see the gathered weight.
    pre = module.register_forward_pre_hook(state._unshard, prepend=True)
    post = module.register_forward_hook(state._reshard, always_call=True)
    module._parameters["weight"] = placeholder
    try:
        yield state
    finally:
        pre.remove()
        post.remove()
        module._parameters["weight"] = real
