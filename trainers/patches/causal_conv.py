"""Qwen3.5's depthwise causal conv as a few tensor ops instead of a oneDNN convolution.

Without the `causal-conv1d` package (every CPU run, and accelerators without it), each Gated
DeltaNet layer runs its short depthwise conv (4 taps over the q/k/v channels) through
`F.conv1d`, which on CPU goes to oneDNN: about 160 us per forward and 1.2 ms per backward call
on the tiny model, around 8% of a GRPO step. The same conv is one multiply and K-1 fused
multiply-adds (`addcmul`) over shifted views of the left-padded input: forward and backward in
0.6 of oneDNN's time on the tiny model's training shape, a decode step in half, with the same
result up to float rounding (patch-parity compares them).

Two targets per model module, both present in every release with Qwen3.5:
- `causal_conv1d_fn`, the training / prefill conv. In 5.2-5.9 it is the optional package's slot
  (None without it) and the layer falls back to its `nn.Conv1d` module, always with SiLU; a
  function in the slot is bound to each layer at build and called with `x=`, `seq_idx=`. From
  5.16 it is the module's own torch function, called with the activation the layer names.
- `causal_conv1d_update`, the one-token decode step that also shifts the conv state in place.
  In 5.2-5.9 the layer binds `causal_conv1d_update or torch_causal_conv1d_update` at build.
Where `causal-conv1d` is installed its kernels are used and the patches do not apply. Calls
this rewrite does not cover (an activation other than SiLU, packed-sequence boundaries) go to
the stock function where there is one; in 5.2-5.9 the stock torch path ignores both.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from packaging.specifiers import SpecifierSet

from .base import DelegatingPatch, NotApplicable, Patch

SILU = ("silu", "swish")  # the names transformers' ACT2FN and causal-conv1d give SiLU
PACKED_KWARGS = ("seq_idx", "cu_seqlens")


def _taps(padded: torch.Tensor, weight: torch.Tensor, length: int) -> torch.Tensor:
    """padded (batch, length + K - 1, channels), time-major: out[:, t] = sum_j w[:, j] * padded[:, t + j] for
    t < length, in float32 (as oneDNN accumulates half types): one multiply and K-1 fused multiply-adds over
    shifted views, each with a cheap backward. Time-major because a shift along time is then a whole contiguous
    block of (time, channels) and every op runs over rows of all the channels; channels-major, each op walks
    (batch x channels) rows of `length` elements and took 2-3 times as long at the tiny model's shapes."""
    taps = weight.float().t()  # (K, channels): tap j broadcasts over (batch, length, channels)
    padded = padded.float()
    out = padded[:, :length] * taps[0]
    for j in range(1, weight.shape[-1]):
        out = torch.addcmul(out, padded[:, j:j + length], taps[j])
    return out


def _finish(out: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, silu: bool) -> torch.Tensor:
    """Bias and activation of a time-major `out`, in the weight's dtype, as the stock conv applies them."""
    if bias is not None:
        out = out + bias.float()
    out = out.to(weight.dtype)
    return F.silu(out) if silu else out


def depthwise_causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                          silu: bool) -> torch.Tensor:
    """x (batch, channels, length), weight (channels, taps): out[..., t] = sum_j w[:, j] x[..., t - taps + 1 + j]
    with zeros before the start, as `F.conv1d(..., padding=taps - 1, groups=channels)[..., :length]`.

    Computed time-major and returned as a (batch, channels, length) view of it: the Gated DeltaNet layer hands in
    its (batch, length, channels) projection transposed and transposes the result straight back, so neither
    transpose copies."""
    padded = F.pad(x.transpose(1, 2), (0, 0, weight.shape[-1] - 1, 0))
    return _finish(_taps(padded, weight, x.shape[-1]), weight, bias, silu).to(x.dtype).transpose(1, 2)


def _wants_silu(activation: str | None) -> bool | None:
    """True / False for SiLU / none; None for an activation this rewrite leaves to the stock code."""
    if activation is None:
        return False
    return True if activation in SILU else None


def make_conv_fn(stock: Callable[..., Any] | None) -> Callable[..., Any]:
    def causal_conv1d_fn(hidden_states=None, weight=None, bias=None, activation=None, *, x=None, **kwargs):
        x = hidden_states if hidden_states is not None else x
        if stock is None:  # 5.2-5.9: stands in for the layer's nn.Conv1d path, which applies SiLU and no packing
            return depthwise_causal_conv(x, weight, bias, silu=True)
        silu = _wants_silu(activation)
        if silu is None or any(kwargs.get(name) is not None for name in PACKED_KWARGS):
            return stock(x, weight, bias, activation=activation, **kwargs)
        return depthwise_causal_conv(x, weight, bias, silu)

    causal_conv1d_fn.__wrapped__ = stock
    return causal_conv1d_fn


def make_conv_update(stock: Callable[..., Any] | None) -> Callable[..., Any]:
    def causal_conv1d_update(hidden_states, conv_state, weight, bias=None, activation=None, **kwargs):
        silu = True if stock is None else _wants_silu(activation)  # 5.2-5.9's torch update applies SiLU
        if stock is not None and (silu is None or kwargs):
            return stock(hidden_states, conv_state, weight, bias, activation, **kwargs)
        length, kept = hidden_states.shape[-1], conv_state.shape[-1]
        joined = torch.cat([conv_state, hidden_states], dim=-1).to(weight.dtype)
        conv_state.copy_(joined[:, :, -kept:])
        taps = weight.shape[-1]
        if length == 1:  # the usual decode step: one window, the last `taps` inputs
            out = (joined[:, :, -taps:].float() * weight.float()).sum(-1, keepdim=True).transpose(1, 2)
        else:
            out = _taps(joined[:, :, -(length + taps - 1):].transpose(1, 2), weight, length)
        return _finish(out, weight, bias, silu).to(hidden_states.dtype).transpose(1, 2)

    causal_conv1d_update.__wrapped__ = stock
    return causal_conv1d_update


@dataclass
class CausalConvPatch(DelegatingPatch):
    def check_applicable(self) -> None:
        super().check_applicable()
        if importlib.util.find_spec("causal_conv1d") is not None:
            raise NotApplicable(f"{self.name}: causal-conv1d is installed; its kernels are used")


PATCHES: list[Patch] = [
    CausalConvPatch(
        name=f"causal-conv1d{suffix}:{module}",
        target=f"transformers.models.{module}.modeling_{module}:{symbol}",
        replacement=None,
        make=make,
        versions=SpecifierSet(">=5.2"),
        description=f"Gated DeltaNet depthwise causal conv ({what}) as shifted multiply-adds instead of oneDNN",
    )
    for module in ("qwen3_5", "qwen3_5_moe")
    for suffix, symbol, make, what in (("", "causal_conv1d_fn", make_conv_fn, "training and prefill"),
                                       ("-update", "causal_conv1d_update", make_conv_update, "one-token decode"))
]
