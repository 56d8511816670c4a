"""The op table behind the NPU patches: each fused op, its torch reference and its torch_npu call.

An entry has three implementations with one signature:
- `reference`: plain torch with the precision rules of the stock transformers Qwen3.5 code;
- `emulation`: plain torch written from the torch_npu documentation of the fused op (its dtype
  rules included, e.g. `npu_rms_norm` wants gamma in the input's dtype and computes in fp32), so
  the patches' numerics can be checked on a machine without Ascend;
- `npu`: the torch_npu call itself, used only when trainers.runtime.device picks the NPU.
The patched forwards call `fused(name)`, which reads the table at call time, so a test can put
a deliberately wrong entry in it and see the parity check fail.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float  # relative to the largest magnitude of the reference


# One table for every comparison of patched and stock numerics. bf16 allows about two units in
# the last place: the fused ops round differently (fp32 inside, gamma cast to the input dtype).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


# --- references: the computations of the stock transformers code, op by op -------------------
def _rms_norm_reference(x, gamma, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gamma.float()).to(x.dtype)


def _rms_norm_gated_reference(x, gate, weight, eps):
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ((weight * normed) * F.silu(gate.float())).to(x.dtype)


def _rotary_mul_reference(x, cos, sin):
    return x * cos + _rotate_half(x) * sin  # in the input dtype, as stock apply_rotary_pos_emb


def _swiglu_reference(x, dim=-1):
    a, b = torch.chunk(x, 2, dim=dim)
    return F.silu(a) * b


# --- emulations: the documented semantics of the torch_npu fused ops --------------------------
def _npu_rms_norm_emulated(x, gamma, eps):
    # torch_npu.npu_rms_norm(x, gamma, epsilon) -> (y, rstd); gamma must have x's dtype.
    if gamma.dtype != x.dtype:
        raise TypeError(f"npu_rms_norm: gamma dtype {gamma.dtype} differs from input dtype {x.dtype}")
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x.dtype)


def _npu_rms_norm_gated_emulated(x, gate, weight, eps):
    # No fused gated RMSNorm in torch_npu: npu_rms_norm, then the SiLU gate in fp32.
    normed = _npu_rms_norm_emulated(x, weight.to(x.dtype), eps)
    return (normed.float() * F.silu(gate.float())).to(x.dtype)


def _npu_rotary_mul_emulated(x, cos, sin):
    # npu_rotary_mul(input, r1, r2, rotary_mode='half'): 4-D input, r1 * x + r2 * rotate_half(x).
    if x.dim() != 4 or cos.dim() != 4 or sin.dim() != 4:
        raise ValueError("npu_rotary_mul takes 4-D input, r1 and r2")
    return (x.float() * cos.float() + _rotate_half(x.float()) * sin.float()).to(x.dtype)


def _npu_swiglu_emulated(x, dim=-1):
    # npu_swiglu(x, dim): A, B = x split in two along dim; out = silu(A) * B.
    a, b = torch.chunk(x.float(), 2, dim=dim)
    return (F.silu(a) * b).to(x.dtype)


# --- the real torch_npu calls (Ascend only) ----------------------------------------------------
def _npu_rms_norm(x, gamma, eps):
    import torch_npu

    return torch_npu.npu_rms_norm(x, gamma.to(x.dtype), epsilon=eps)[0]


def _npu_rms_norm_gated(x, gate, weight, eps):
    import torch_npu

    normed = torch_npu.npu_rms_norm(x, weight.to(x.dtype), epsilon=eps)[0]
    return (normed.float() * F.silu(gate.float())).to(x.dtype)


def _npu_rotary_mul(x, cos, sin):
    import torch_npu

    return torch_npu.npu_rotary_mul(x.contiguous(), cos.contiguous(), sin.contiguous())


def _npu_swiglu(x, dim=-1):
    import torch_npu

    return torch_npu.npu_swiglu(x, dim=dim)


@dataclass(frozen=True)
class FusedOp:
    name: str
    npu_symbols: tuple[str, ...]  # "torch_npu:npu_rms_norm": what the `npu` implementation calls
    reference: Callable[..., torch.Tensor]
    emulation: Callable[..., torch.Tensor]
    npu: Callable[..., torch.Tensor]


OP_TABLE: dict[str, FusedOp] = {
    "rms_norm": FusedOp("rms_norm", ("torch_npu:npu_rms_norm",), _rms_norm_reference,
                        _npu_rms_norm_emulated, _npu_rms_norm),
    "rms_norm_gated": FusedOp("rms_norm_gated", ("torch_npu:npu_rms_norm",), _rms_norm_gated_reference,
                              _npu_rms_norm_gated_emulated, _npu_rms_norm_gated),
    "rotary_mul": FusedOp("rotary_mul", ("torch_npu:npu_rotary_mul",), _rotary_mul_reference,
                          _npu_rotary_mul_emulated, _npu_rotary_mul),
    "swiglu": FusedOp("swiglu", ("torch_npu:npu_swiglu",), _swiglu_reference,
                      _npu_swiglu_emulated, _npu_swiglu),
}

# How often each op was dispatched: lets a check prove that a patched path really ran.
CALLS: Counter[str] = Counter()


@functools.lru_cache(maxsize=1)
def on_npu() -> bool:
    """Whether the fused ops resolve to torch_npu (decided once, by trainers.runtime.device)."""
    from trainers.runtime.device import plan

    return plan().type == "npu"


def fused(name: str) -> Callable[..., torch.Tensor]:
    """The implementation of op `name` for this process: torch_npu on Ascend, the emulation elsewhere."""
    op = OP_TABLE[name]
    CALLS[name] += 1
    return op.npu if on_npu() else op.emulation


def npu_symbol_targets() -> list[str]:
    """Every torch_npu symbol the table calls, as audit targets ("torch_npu:npu_rms_norm")."""
    return sorted({symbol for op in OP_TABLE.values() for symbol in op.npu_symbols})


# torch_npu exports its fused ops at import time from torch.ops.npu (C++), so they are not defined
# in any Python file; the public list of them is a literal in this module of the package.
_EXPORTED_API = "torch_npu/utils/exposed_api.py"


def _public_functions(source: str) -> set[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "public_npu_functions" for t in node.targets):
            return {str(name) for name in ast.literal_eval(node.value)}
    raise ValueError(f"{_EXPORTED_API}: no public_npu_functions list")


def torch_npu_exported_symbols(location: str | Path | None = None) -> set[str]:
    """torch_npu's public fused-op names, read without importing it (it needs CANN to import).

    `location` is a torch_npu wheel, a directory holding the `torch_npu` package, or None for
    the installed package. Raises FileNotFoundError when there is nothing to read.
    """
    if location is None:
        spec = importlib.util.find_spec("torch_npu")  # top-level: locates without importing
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("torch_npu is not installed")
        location = Path(next(iter(spec.submodule_search_locations))).parent
    location = Path(location)
    if location.is_file():
        with zipfile.ZipFile(location) as wheel:
            return _public_functions(wheel.read(_EXPORTED_API).decode("utf-8"))
    return _public_functions((location / _EXPORTED_API).read_text(encoding="utf-8"))


def missing_npu_symbols(location: str | Path | None = None) -> list[str]:
    """The table's torch_npu targets that the given (or installed) torch_npu does not export."""
    exported = torch_npu_exported_symbols(location)
    return [target for target in npu_symbol_targets() if target.split(":", 1)[1] not in exported]

