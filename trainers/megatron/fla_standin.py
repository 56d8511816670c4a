"""CPU stand-ins for the two flash-linear-attention (FLA) kernels megatron-core's packed GDN path calls.

Outside `deterministic_mode`, megatron-core's GatedDeltaNet (0.18+) runs packed (THD) input through
FLA's varlen kernels: `causal_conv1d(x, weight, bias, activation, ..., cu_seqlens)` and
`chunk_gated_delta_rule(q, k, v, g, beta, ..., cu_seqlens)`, both Triton GPU kernels. On a CPU runner
the probe (packed.py) supplies these two names, each computed one sequence at a time between the
`cu_seqlens` boundaries it is given: the conv as a depthwise causal convolution, the recurrence by
megatron-core's own pure-torch `torch_chunk_gated_delta_rule` (which takes no cu_seqlens). Everything
else on the path (boundaries, reshapes, gating, norm) is megatron-core's code, so what is measured is
whether megatron-core hands the kernels the right boundaries; results say the kernels were emulated.
Whether the recurrence itself is right cannot be measured against the same rule: the probe holds the packed
output to another implementation too (packed.py's `reference`).
"""
from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F

NAMES = ("causal_conv1d", "chunk_gated_delta_rule")


def _segments(total: int, cu_seqlens) -> list[tuple[int, int]]:
    if cu_seqlens is None:
        return [(0, total)]
    bounds = [int(b) for b in cu_seqlens.tolist()]
    return list(zip(bounds[:-1], bounds[1:]))


def causal_conv1d(x, weight, bias=None, activation=None, initial_state=None, output_final_state=False,
                  cu_seqlens=None, **_):
    """x (B, T, D), weight (D, W): each sequence convolved alone, left-padded by W-1 zeros."""
    width = weight.shape[-1]
    pieces = []
    for start, end in _segments(x.shape[1], cu_seqlens):
        seg = x[:, start:end].transpose(1, 2)  # (B, D, t)
        out = F.conv1d(F.pad(seg, (width - 1, 0)), weight.unsqueeze(1), bias, groups=weight.shape[0])
        pieces.append(out.transpose(1, 2))
    y = torch.cat(pieces, dim=1)
    if activation in ("silu", "swish"):
        y = F.silu(y)
    return y, None


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, use_qk_l2norm_in_kernel=False, torch_rule=None, **_):
    """(B, T, H, K) inputs: megatron-core's torch_chunk_gated_delta_rule run once per sequence."""
    pieces = []
    for start, end in _segments(q.shape[1], cu_seqlens):
        out, _state = torch_rule(q[:, start:end], k[:, start:end], v[:, start:end], g[:, start:end],
                                 beta[:, start:end], initial_state=None, output_final_state=False,
                                 use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
        pieces.append(out)
    return torch.cat(pieces, dim=1), None


@contextlib.contextmanager
def outside_deterministic_mode(layer):
    """Run `layer` (a built GatedDeltaNet) as megatron-core runs it without `deterministic_mode`: the flag
    off, and FLA's two kernels (stand-ins where FLA is absent) where its code looks them up. Restores all.
    Yields the names that were emulated."""
    # megatron-core's own class (the trainer subclasses it): the module whose names its forward reads
    own = next((c for c in type(layer).__mro__ if c.__module__.startswith("megatron.core")), type(layer))
    module = sys.modules[own.__module__]
    torch_rule = getattr(module, "torch_chunk_gated_delta_rule", None)
    saved_flag, saved_rule = layer.config.deterministic_mode, layer.__dict__.get("gated_delta_rule")
    saved = {name: (name in module.__dict__, module.__dict__.get(name)) for name in NAMES}
    emulated = []
    try:
        layer.config.deterministic_mode = False
        emulated = [name for name in NAMES if saved[name][1] is None and torch_rule is not None]
        if "causal_conv1d" in emulated:
            module.causal_conv1d = causal_conv1d
        kernel = saved["chunk_gated_delta_rule"][1]
        if "chunk_gated_delta_rule" in emulated:
            def kernel(*args, **kwargs):
                return chunk_gated_delta_rule(*args, torch_rule=torch_rule, **kwargs)
            module.chunk_gated_delta_rule = kernel
        if saved_rule is not None:  # bound at __init__ from the flag (0.18+)
            layer.gated_delta_rule = kernel
        yield emulated
    finally:
        layer.config.deterministic_mode = saved_flag
        if saved_rule is not None:
            layer.gated_delta_rule = saved_rule
        for name, (present, value) in saved.items():
            if present:
                setattr(module, name, value)
            elif name in module.__dict__:
                delattr(module, name)
