"""Which accelerators this host has, asked of the vendor tools (no torch needed).

The accelerator sessions ask this first and stop at once, non-zero, when the device is
missing: a GPU session on a CPU-only machine must never pass silently.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

from harness.errors import EnvironmentMissing

# device -> (session that needs it, what to run instead)
SESSIONS = {"cuda": "gpu-fsdp-qwen35 / gpu-megatron-qwen35", "npu": "npu-matrix"}


# Device nodes of the kernel drivers an accelerator runtime opens (NVIDIA, WSL's GPU bridge, AMD's ROCm,
# Ascend): without any of them torch can see no device.
ACCELERATOR_NODES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/dxg", "/dev/kfd", "/dev/davinci[0-9]*")


def accelerator_nodes(patterns: tuple[str, ...] = ACCELERATOR_NODES) -> list[str]:
    """The accelerator device nodes of this host (empty on a CPU-only one)."""
    return sorted(path for pattern in patterns for path in glob.glob(pattern))


def _run(argv: list[str]) -> tuple[int, str]:
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} not found on PATH"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def probe(device: str) -> tuple[bool, str]:
    """(present, what the probe saw) for cpu, cuda or npu."""
    if device == "cpu":
        return True, "cpu"
    if device == "cuda":
        code, out = _run(["nvidia-smi", "-L"])
        present = code == 0 and "GPU" in out
        return present, out if present else f"no NVIDIA GPU: `nvidia-smi -L` -> {out or code}"
    if device == "npu":
        code, out = _run(["npu-smi", "info"])
        if code == 0:
            return True, out
        nodes = glob.glob("/dev/davinci[0-9]*")
        if nodes:
            return True, f"devices {' '.join(nodes)}"
        return False, f"no Ascend NPU: `npu-smi info` -> {out or code}, no /dev/davinci*"
    raise ValueError(f"unknown device {device!r}")


# device -> the variable that limits which of the host's devices a process sees (its runtime reads it at start)
VISIBLE_VARIABLE = {"cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


def visible_devices(device: str) -> list[str] | None:
    """The ids of the `device` accelerators processes started from here may use, in the form the device's
    visibility variable takes: the variable's own list when the user set it, else the devices the vendor
    tool lists (`nvidia-smi -L`) or the kernel's device nodes (`/dev/davinciN`). [] on cpu; None when they
    cannot be told (no tool): the caller then shares devices without a device budget."""
    if device == "cpu":
        return []
    variable = VISIBLE_VARIABLE[device]
    if variable in os.environ:
        return [part.strip() for part in os.environ[variable].split(",") if part.strip()]
    if device == "cuda":
        code, out = _run(["nvidia-smi", "-L"])
        ids = re.findall(r"^GPU (\d+):", out, flags=re.MULTILINE) if code == 0 else []
    else:
        ids = sorted((m.group(1) for m in (re.fullmatch(r"/dev/davinci(\d+)", p) for p in glob.glob("/dev/davinci*"))
                      if m), key=int)
    return ids or None


def require(device: str, what: str) -> str:
    """Raise EnvironmentMissing (exit 3) naming what is missing and what to run instead."""
    present, seen = probe(device)
    if not present:
        raise EnvironmentMissing(f"{what} needs device {device!r} but this machine has none "
                                 f"({seen.splitlines()[0]}); on a CPU-only machine run `nox -s cpu-fsdp-qwen35`")
    return seen


def tool_report(device: str) -> str:
    """`nvidia-smi` or `npu-smi info` output for the environment record; '' on CPU."""
    argv = {"cuda": ["nvidia-smi"], "npu": ["npu-smi", "info"]}.get(device)
    return _run(argv)[1] if argv else ""
