"""Names megatron-core imports from optional kernel libraries, supplied where those are absent.

megatron-core's Gated DeltaNet (`megatron/core/ssm/gated_delta_net.py`) imports `l2norm` and
`chunk_gated_delta_rule` from flash-linear-attention (FLA) and sets `HAVE_FLA` from that import.
Without FLA, `GatedDeltaNet.__init__` raises ImportError on `not HAVE_FLA` (the guard) and
`forward` calls the never-bound `l2norm` on q and k. FLA's kernel itself is not needed: with
`config.deterministic_mode` the layer runs megatron-core's own pure-torch
`torch_chunk_gated_delta_rule` and a plain conv1d (no causal_conv1d).
Its MoE router (`megatron/core/transformer/moe/moe_utils.py`, 0.16.1) tests
`te_general_gemm is not None`, a name bound only when Transformer Engine imports: without TE the
router raises NameError, so the shim binds it to None, what the import guard meant (torch matmul).

From megatron-core 0.18 the layer is a package (`gated_delta_net/common.py` holds the guard and
binds `l2norm = None` without FLA); the shim sets the names in the first of those modules that exists.
Each name is set only where its library is absent and the name is missing (or the guard false, or
`l2norm` None), and `record()` lists what was supplied. Where FLA or TE is installed nothing is touched.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field

import torch

# Where megatron-core keeps the names, newest layout first.
_GDN = ("megatron.core.ssm.gated_delta_net.common", "megatron.core.ssm.gated_delta_net")
_MOE_UTILS = ("megatron.core.transformer.moe.moe_utils",)


def l2norm(x: torch.Tensor, dim: int = -1, eps: float = 1e-6) -> torch.Tensor:
    """FLA's l2norm: x / sqrt(sum(x^2) + eps) over the last dimension, computed in float32."""
    x32 = x.float()
    return (x32 * torch.rsqrt((x32 * x32).sum(dim=dim, keepdim=True) + eps)).to(x.dtype)


# name -> (candidate modules, library whose absence it stands for, value, values that count as unbound)
SYMBOLS = {"HAVE_FLA": (_GDN, "fla", True, (False,)), "l2norm": (_GDN, "fla", l2norm, (None,)),
           "te_general_gemm": (_MOE_UTILS, "transformer_engine", None, ())}


def _module(candidates: tuple[str, ...]):
    for name in candidates:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {', '.join(candidates)} is importable")


def installed(library: str) -> bool:
    return importlib.util.find_spec(library) is not None


def fla_available() -> bool:
    return installed("fla")


def gdn_kernel_path() -> str:
    """Which gated delta rule megatron-core's GDN runs here (what `deterministic_mode` selects)."""
    return "fla chunk_gated_delta_rule" if fla_available() else "megatron-core torch_chunk_gated_delta_rule"


_MISSING = object()


@dataclass
class KernelShim:
    """Sets the missing names on megatron-core's modules; `remove()` restores what was there."""

    omit: tuple[str, ...] = ()  # names deliberately not supplied (tests watch the layer fail)
    supplied: list[str] = field(default_factory=list)
    _saved: dict = field(default_factory=dict)

    def install(self) -> KernelShim:
        for name, (candidates, library, value, unbound) in SYMBOLS.items():
            if name in self.omit or installed(library):
                continue
            module = _module(candidates)
            current = getattr(module, name, _MISSING)
            if current is not _MISSING and not any(current is u for u in unbound):
                continue  # bound already (a release that fixed its guard): leave it
            self._saved[(module.__name__, name)] = current
            setattr(module, name, value)
            self.supplied.append(f"{module.__name__.rsplit('.', 1)[-1]}.{name}")
        return self

    def remove(self) -> None:
        for (module_name, name), value in self._saved.items():
            module = importlib.import_module(module_name)
            if value is _MISSING:
                delattr(module, name)
            else:
                setattr(module, name, value)
        self._saved, self.supplied = {}, []

    def record(self) -> dict:
        return {"fla_installed": fla_available(), "transformer_engine_installed": installed("transformer_engine"),
                "shim_symbols": list(self.supplied), "gated_delta_rule": gdn_kernel_path()}
