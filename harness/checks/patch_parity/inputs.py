"""Shared pieces of the patch-parity check: tolerances' shape, tiny models and their inputs,
error measures, and which patches touch which model."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainers.patches.base import Patch, TargetMissing, resolve, split_target
from trainers.worst import worst, worst_key

KINDS = ("text", "vl", "moe")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# patch-parity's models are the zoo's at one layer of each kind (trainers.models.ONE_OF_EACH), where the zoo has
# three Gated DeltaNet layers and one full-attention layer. Every comparison is one model two ways, and the two more
# DeltaNet layers only repeated what the first runs, at about half the check's time where transformers <= 5.9 runs
# its stock chunk rule (a 64-row loop, forward and backward). Measured at either depth: the same verdicts with the same
# statuses on transformers 5.2.0, 5.5.3, 5.9.0, 5.16.1 (with vLLM) and 5.23.0, and in a verl 0.9.1 row.


def parity_overrides(given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per model kind, the config override patch-parity builds with: a kind's `given` one (a --model-config) as
    given, every other kind the zoo's at one layer of each kind."""
    from trainers.models import one_of_each

    return {**{kind: one_of_each(kind) for kind in KINDS}, **(given or {})}


@dataclass(frozen=True)
class Tolerance:
    """Pass bounds for one dtype (the table itself lives in patch_parity.py)."""

    output: float  # max abs error of logits, log-probs and entropies
    grad: float  # max abs gradient error / largest stock gradient of the model
    rollout: float  # max abs error of the engine's sampled-token log-probs against the trainer


class Models:
    """Tiny models built once per (kind, dtype); patches change classes, so one instance serves both sides.

    Also keeps what the stock code computed on them (`stock`): the stock side of every patch's
    comparison is the same forward on the same model and inputs, so it runs once per (kind, dtype,
    probe), before any patch is applied, instead of once per patch. `built_stock` does the same for the patches
    compared on models built under them (built.compare_built): the model built without a patch, probed once per
    (kind, dtype, seed).
    Models are built at one layer of each kind unless `overrides` gives the kind's config (parity_overrides).
    """

    def __init__(self, seed: int = 0, overrides: dict[str, Any] | None = None):
        self.seed = seed
        self.overrides = parity_overrides(overrides)
        self._cache: dict[tuple[str, str], torch.nn.Module] = {}
        self._stock: dict[tuple, Any] = {}
        self.built_stock: dict[tuple, Any] = {}

    def stock(self, probe: Callable[..., Any], kind: str, dtype: str, seed: int) -> Any:
        """`probe(model, model_inputs(model, kind, seed), seed)` the first time, the kept result afterwards."""
        key = (probe, kind, dtype, seed)
        if key not in self._stock:
            model = self.get(kind, dtype)
            self._stock[key] = probe(model, model_inputs(model, kind, seed), seed)
        return self._stock[key]

    def get(self, kind: str, dtype: str = "float32") -> torch.nn.Module:
        from trainers.models import build_model

        if (kind, dtype) not in self._cache:
            if dtype == "float32":
                model = build_model(kind, self.overrides.get(kind), seed=self.seed)
                model.config._attn_implementation = "sdpa"
            else:
                model = copy.deepcopy(self.get(kind, "float32")).to(DTYPES[dtype])
            self._cache[(kind, dtype)] = model.train()  # dropout is 0; train() as the trainer runs it
        return self._cache[(kind, dtype)]


def text_config(model):
    return getattr(model.config, "text_config", model.config)


def model_inputs(model, kind: str, seed: int, batch: int = 2, length: int = 24) -> dict[str, torch.Tensor]:
    """Random tokens; for the vision-language model one small image per row, placed mid-prompt."""
    gen = torch.Generator().manual_seed(seed)
    vocab = text_config(model).vocab_size
    # Stay below the special ids the VL config reserves at the top of the tiny vocabulary.
    high = min(vocab, getattr(model.config, "image_token_id", vocab))
    input_ids = torch.randint(3, high, (batch, length), generator=gen)
    if kind != "vl":
        return {"input_ids": input_ids}
    config, vision = model.config, model.config.vision_config
    grid = torch.tensor([[1, 4, 4]] * batch)
    tokens_per_image = int(grid[0].prod()) // vision.spatial_merge_size ** 2
    start = 3
    input_ids[:, start] = config.vision_start_token_id
    input_ids[:, start + 1:start + 1 + tokens_per_image] = config.image_token_id
    input_ids[:, start + 1 + tokens_per_image] = config.vision_end_token_id
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixel_values = torch.randn(int(grid.prod(-1).sum()), patch_dim, generator=gen).to(model.dtype)
    return {"input_ids": input_ids, "pixel_values": pixel_values, "image_grid_thw": grid,
            "mm_token_type_ids": (input_ids == config.image_token_id).int()}


def cotangent(shape, seed: int) -> torch.Tensor:
    """Fixed random weights that turn an output into a scalar loss (every element gets a gradient)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def gradients(model) -> dict[str, torch.Tensor | None]:
    grads = {n: (p.grad.detach().float().clone() if p.grad is not None else None) for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.detach().float() - b.detach().float()).abs().max()) if a.numel() else 0.0


def grad_error(stock: dict[str, torch.Tensor | None], patched: dict[str, torch.Tensor | None]) -> tuple[float, str]:
    """(max abs difference / largest stock gradient, name of the worst parameter).

    Relative to the model's largest gradient, not each parameter's, so parameters whose
    gradients are nearly zero do not turn rounding noise into large relative errors.
    """
    scale = worst((float(g.abs().max()) for g in stock.values() if g is not None), default=0.0) or 1.0
    errors = {}
    for name, g in stock.items():
        other = patched.get(name)
        if (g is None) != (other is None):
            return float("inf"), f"{name} (gradient present on one side only)"
        if g is not None:
            errors[name] = max_abs(g, other) / scale
    if not errors:
        return 0.0, ""
    name = worst_key(errors)  # a NaN anywhere is the worst, as it must fail the tolerance
    return errors[name], name


def target_owner(patch: Patch):
    """The object the patch's target attribute lives on (a class or a module), or None if absent."""
    try:
        return resolve(patch.target)[0]
    except TargetMissing:
        return None


def kinds_touched(patch: Patch, models: Models, kinds=KINDS) -> list[str]:
    """The model kinds whose forward runs through the patch's target."""
    owner = target_owner(patch)
    if owner is None:
        return []
    touched = []
    for kind in kinds:
        model = models.get(kind)
        if isinstance(owner, type):
            hit = any(isinstance(m, owner) for m in model.modules())
        else:  # a module-level function: used by models defined in that module
            module_name = split_target(patch.target)[0]
            hit = any(type(m).__module__ == module_name for m in model.modules())
        if hit:
            touched.append(kind)
    return touched

