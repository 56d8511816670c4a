"""Device decisions, made here only: which device, which process-group backend, which
mixed precision, whether to pin memory. One code path for cpu, cuda and npu."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import torch

_DIST_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except Exception:  # without CANN the import fails: no NPU here
        return False
    return bool(getattr(torch, "npu", None)) and torch.npu.is_available()


def detect_device_type(requested: str | None = None) -> str:
    """`requested` if given (validated), else the accelerator present, else cpu."""
    requested = requested or os.environ.get("HARNESS_DEVICE") or None
    if requested:
        if requested not in _DIST_BACKEND:
            raise ValueError(f"unknown device {requested!r}; expected cpu, cuda or npu")
        if requested == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("device cuda requested but torch.cuda.is_available() is False")
        if requested == "npu" and not _npu_available():
            raise RuntimeError("device npu requested but torch_npu reports no NPU")
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if _npu_available():
        return "npu"
    return "cpu"


@dataclass(frozen=True)
class DevicePlan:
    type: str
    dist_backend: str
    pin_memory: bool  # pinned host memory needs an accelerator
    mixed_precision: bool  # bf16 parameters on accelerators; fp32 on CPU for exact checks

    def device(self, local_rank: int = 0) -> torch.device:
        return torch.device("cpu") if self.type == "cpu" else torch.device(self.type, local_rank)

    def device_count(self) -> int | None:
        """The accelerators this process sees (one rank each); None on cpu, where ranks share the processor."""
        return None if self.type == "cpu" else getattr(torch, self.type).device_count()

    def optimizer_kernel(self, sharded: bool) -> dict[str, bool]:
        """How AdamW updates the parameters: torch's fused kernel (one pass over each tensor; 0.44 ms against
        foreach's 1.33 ms a step for the tiny model on CPU) on cpu and cuda for plain tensors; foreach (one op per
        list of tensors) for FSDP2's sharded DTensors and on npu, where the fused kernel is not torch's to vouch for."""
        return {"fused": True} if self.type in ("cpu", "cuda") and not sharded else {"foreach": True}


def plan(requested: str | None = None) -> DevicePlan:
    kind = detect_device_type(requested)
    accelerated = kind != "cpu"
    return DevicePlan(kind, _DIST_BACKEND[kind], pin_memory=accelerated, mixed_precision=accelerated)


def set_cpu_threads() -> None:
    """One thread per process on CPU: CPU runners are often shared, and timings swing 100x otherwise."""
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set once in this process


def cpu_trainer_settings() -> bool:
    """A trainer process on CPU: one thread, and denormal floats flushed to zero (True if the CPU can).

    The Gated DeltaNet's decays are exponentials of sums of log-gates, and in training some land below
    float32's smallest normal (about exp(-87)); x86 handles such operands in microcode, and the batched
    matmuls and triangular solves that meet them ran up to 25x slower (385 us against 15 us a call on the
    tiny model). Flushed, they count as the zeros they round to in any sum with a normal term: a GRPO step
    3 ms faster (5%), the same reward curve. The GRPO benchmark gives TRL's trainer the same settings."""
    set_cpu_threads()
    return torch.set_flush_denormal(True)
