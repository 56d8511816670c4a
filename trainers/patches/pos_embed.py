"""Position-embedding device fix for the vision towers of Qwen3.5 and Qwen3-VL.

In transformers 5.2.0 to 5.8.1, `<Vision>Model.fast_pos_embed_interpolate` builds its lookup
indices and bilinear weights on `self.pos_embed.weight.device`. Under FSDP2 with
`CPUOffloadPolicy`, when `pos_embed` is its own FSDP unit, that weight is still the CPU shard
when the method reads its device (FSDP2 moves it to the accelerator only inside `pos_embed`'s
own forward), so the indices land on the CPU and `F.embedding` fails on a device mismatch.
The replacement builds them on `grid_thw.device`: where the inputs are is where the compute is.

Version boundaries, read from the installed sources:
- 5.2.0 (first release with Qwen3.5) to 5.8.1: the method reads the weight's device, and the
  vision forward calls it. The method is the same text in all four classes below.
- 5.9.0: the forward computes the indices in `transformers.vision_utils` on `grid_thw.device`;
  the method remains, deprecated and unused by the forward, so patching it would change
  nothing: the patch reports NotApplicable there. Later releases remove the method.
- The Qwen3-VL twins have the same bug since before 5.2 (5.0.0 reads the weight's device too,
  iterating over the grid as tensors rather than lists; same numbers), so their range starts at 5.0.
"""
from __future__ import annotations

import torch
from packaging.specifiers import SpecifierSet

from .base import Patch

METHOD = "fast_pos_embed_interpolate"

# (transformers module, vision class, versions where the stock method has the bug and is used)
_TARGETS = (
    ("qwen3_5", "Qwen3_5VisionModel", ">=5.2,<5.9"),
    ("qwen3_5_moe", "Qwen3_5MoeVisionModel", ">=5.2,<5.9"),
    ("qwen3_vl", "Qwen3VLVisionModel", ">=5.0,<5.9"),
    ("qwen3_vl_moe", "Qwen3VLMoeVisionModel", ">=5.0,<5.9"),
)


def _bilinear_axis(size: int, grid: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Spread `size` output positions evenly over `grid` learned positions along one axis.

    Returns the lower and upper neighbouring grid index of each position and its fractional
    distance from the lower one. Computed on the CPU in float32, as the stock method does, so
    that the weights are bit-identical to it whatever the compute device.
    """
    position = torch.linspace(0, grid - 1, size)
    lower = position.int()
    upper = (lower + 1).clamp(max=grid - 1)
    return lower, upper, position - lower


def _merge_block_order(height: int, width: int, merge: int) -> torch.Tensor:
    """Permutation from row-major patch order to the order the patch merger expects:
    `merge x merge` blocks one after another, row-major inside each block."""
    order = torch.arange(height * width).view(height // merge, merge, width // merge, merge)
    return order.permute(0, 2, 1, 3).reshape(-1)


def _lookup_plan(grid_thw: torch.Tensor, grid: int, merge: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Indices (4, N) into the learned grid, bilinear weights (4, N), and per image
    (frames, merge-block order of its height x width patches).

    N sums height x width over the images, in row-major patch order and one frame each; the
    reordering and the frame repeat happen after the lookup, so that the embedding's backward
    accumulates gradients in the same order as the stock method (bit-identical on CPU).
    The four rows are the corners (low row, low col), (low, high), (high, low), (high, high).
    """
    indices, weights, images = [], [], []
    for t, h, w in grid_thw.tolist():
        row_lo, row_hi, d_row = _bilinear_axis(h, grid)
        col_lo, col_hi, d_col = _bilinear_axis(w, grid)
        corners = ((row_lo, col_lo), (row_lo, col_hi), (row_hi, col_lo), (row_hi, col_hi))
        corner_weights = ((1 - d_row, 1 - d_col), (1 - d_row, d_col), (d_row, 1 - d_col), (d_row, d_col))
        indices.append(torch.stack([(r * grid)[:, None] + c[None, :] for r, c in corners]).flatten(1))
        weights.append(torch.stack([a[:, None] * b[None, :] for a, b in corner_weights]).flatten(1))
        images.append((t, _merge_block_order(h, w, merge)))
    return torch.cat(indices, dim=1), torch.cat(weights, dim=1), images


def fast_pos_embed_interpolate(self, grid_thw: torch.Tensor) -> torch.Tensor:
    """Bilinearly interpolated learned position embeddings for every patch of every image.

    Same numbers as the stock method; the only change is where the small index and weight
    tensors are put: on `grid_thw.device`, never on the (possibly offloaded) weight's device.
    """
    device = grid_thw.device
    indices, weights, images = _lookup_plan(grid_thw, self.num_grid_per_side, self.config.spatial_merge_size)
    indices = indices.to(device=device, dtype=torch.long)
    weights = weights.to(device=device, dtype=self.pos_embed.weight.dtype)
    corners = self.pos_embed(indices) * weights[:, :, None]
    # Summed in a fixed order (not .sum(0)) to stay bit-identical to the stock method.
    embeds = corners[0] + corners[1] + corners[2] + corners[3]
    per_image = embeds.split([len(order) for _, order in images])
    return torch.cat([piece[order.to(device)].repeat(t, 1) for piece, (t, order) in zip(per_image, images)])


PATCHES: list[Patch] = [
    Patch(
        name=f"pos-embed-device:{cls}",
        target=f"transformers.models.{module}.modeling_{module}:{cls}.{METHOD}",
        replacement=fast_pos_embed_interpolate,
        versions=SpecifierSet(versions),
        description="build the position-embedding lookup on grid_thw.device, not on the offloaded weight's device",
    )
    for module, cls, versions in _TARGETS
]
