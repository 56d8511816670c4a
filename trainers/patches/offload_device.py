"""Rotary buffers on the compute device: the two sites besides the position embedding where
transformers 5.2.0 to 5.8.x combines a buffer with device compute without moving it there.

Under FSDP2 CPU offload the strict device mode of offload-regression (which keeps buffers on the
host with the offloaded parameters) finds, in the stock 5.2-5.8 code:
- `<Text>RotaryEmbedding.forward` multiplies `self.inv_freq` (a non-persistent buffer) with the
  position ids without moving it to their device. 5.9.0 moves it (`inv_freq.to(device=x.device)`).
- `<Vision>Model.rot_pos_emb` builds its frequency table with `torch.arange(..., device=
  self.inv_freq.device)` in the vision rotary embedding, so the table, the position ids built on
  `freq_table.device`, and the rotary cos/sin all land where the buffer is. 5.9.0 computes them in
  `transformers.vision_utils` on the grid's device.

From 5.9.0 to 5.19.x a third site remains: `<Vision>RotaryEmbedding.forward` multiplies its `inv_freq`
buffer with the position ids (`forward(position_ids)` to 5.16.x, `forward(x, position_ids)` in 5.17-5.19)
without moving it; 5.20.0 moves it (`inv_freq.to(device=x.device)`). Read from the wheels of 5.9.0, 5.10.4,
5.12.1, 5.16.1, 5.17.0, 5.18.0, 5.19.0, 5.20.0, 5.20.2 and 5.22.0; found by offload-regression on 5.9.0 and
5.19.0 in the CPU matrix.

The replacements wrap the stock method and only move the buffer to the compute device for the
length of the call (the buffer object is put back afterwards), so the numbers are the stock
numbers wherever the buffer already is on that device. Version boundaries read from the
sources of 5.2.0 to 5.10.0; the MoE classes (`qwen3_5_moe`) carry the same code.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import torch
from packaging.specifiers import SpecifierSet
from torch import nn

from .base import DelegatingPatch

VERSIONS = ">=5.2,<5.9"
VISION_ROTARY_VERSIONS = ">=5.9,<5.20"
_MODULES = (("qwen3_5", "Qwen3_5"), ("qwen3_5_moe", "Qwen3_5Moe"))


@contextlib.contextmanager
def buffer_on(module: nn.Module, name: str, device: torch.device) -> Iterator[None]:
    """`module.<name>` (a buffer) on `device` inside the block, the original buffer after it."""
    original = module._buffers[name]
    if original is None or original.device == device:
        yield
        return
    module._buffers[name] = original.to(device)
    try:
        yield
    finally:
        module._buffers[name] = original


def _text_rotary(stock: Callable) -> Callable:
    @functools.wraps(stock)
    def forward(self, x, position_ids):
        with buffer_on(self, "inv_freq", position_ids.device):
            return stock(self, x, position_ids)
    return forward


def _vision_rot_pos_emb(stock: Callable) -> Callable:
    @functools.wraps(stock)
    def rot_pos_emb(self, grid_thw: torch.Tensor) -> torch.Tensor:
        with buffer_on(self.rotary_pos_emb, "inv_freq", grid_thw.device):
            return stock(self, grid_thw)
    return rot_pos_emb


def _vision_rotary(stock: Callable) -> Callable:
    @functools.wraps(stock)
    def forward(self, *args, **kwargs):
        position_ids = kwargs.get("position_ids", args[-1] if args else None)  # the last input in both forms
        with buffer_on(self, "inv_freq", position_ids.device):
            return stock(self, *args, **kwargs)
    return forward


def _patch(module: str, cls: str, method: str, make: Callable, what: str, versions: str = VERSIONS) -> DelegatingPatch:
    return DelegatingPatch(
        name=f"offload-device:{cls}.{method}",
        target=f"transformers.models.{module}.modeling_{module}:{cls}.{method}",
        replacement=None,
        versions=SpecifierSet(versions),
        description=what,
        make=make,
    )


PATCHES: list[DelegatingPatch] = [
    patch
    for module, prefix in _MODULES
    for patch in (
        _patch(module, f"{prefix}TextRotaryEmbedding", "forward", _text_rotary,
               "move the rotary inv_freq buffer to the position ids' device"),
        _patch(module, f"{prefix}VisionModel", "rot_pos_emb", _vision_rot_pos_emb,
               "build the vision rotary table on grid_thw.device, not on the inv_freq buffer's device"),
        _patch(module, f"{prefix}VisionRotaryEmbedding", "forward", _vision_rotary,
               "move the vision rotary inv_freq buffer to the position ids' device", VISION_ROTARY_VERSIONS),
    )
]
