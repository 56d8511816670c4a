"""Determinism settings per device, decided here only.

Two halves, because some settings must exist before the device runtime starts:
- `environment(device)`: variables the harness puts into every check process of a cell (and the
  accelerator nox sessions into theirs), so that they are set before CUDA or CANN initialise.
  This half imports nothing heavy: the harness host has no torch.
- `apply(device)`: what a trainer process sets on itself at start (deterministic algorithms,
  no cuDNN autotuning), plus the same variables for anything it spawns.

Sources: cuBLAS needs a fixed workspace (CUBLAS_WORKSPACE_CONFIG, PyTorch's reproducibility
notes); NCCL's reductions repeat when its algorithm and protocol are pinned (Megatron-LM's
deterministic mode pins NCCL_ALGO); HCCL_DETERMINISTIC makes Ascend's reduction collectives
deterministic (CANN environment reference), and MindSpeed also disables the matmul K-axis shift.
"""
from __future__ import annotations

import os

ENVIRONMENT = {
    "cpu": {},
    "cuda": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    "npu": {"HCCL_DETERMINISTIC": "true", "CLOSE_MATMUL_K_SHIFT": "1"},
}


def environment(device: str) -> dict[str, str]:
    """The variables for `device` (cpu, cuda or npu); a copy."""
    if device not in ENVIRONMENT:
        raise ValueError(f"unknown device {device!r}; expected one of {', '.join(ENVIRONMENT)}")
    return dict(ENVIRONMENT[device])


def apply(device: str) -> dict[str, str]:
    """Make this process deterministic on `device`; returns the settings in force.

    A variable the user already set is kept (they may know better for their cluster). Ops that
    have no deterministic implementation warn instead of failing the run: the harness reports on
    the stack as users run it, and the warning names the op in the log.
    """
    import torch

    for key, value in environment(device).items():
        os.environ.setdefault(key, value)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if device == "cuda":
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    return {key: os.environ[key] for key in environment(device)} | {"deterministic_algorithms": "warn_only"}
