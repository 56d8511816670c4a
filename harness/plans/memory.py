"""Memory per device for a plan, counted on the real modules built on the `meta` device.

The model is transformers' own causal LM for the plan's config, built on `meta` (no memory, no
weights). FSDP2: the model is really sharded with `fully_shard` under torch's fake process group
of the plan's world size, and rank 0's local shards are counted. Megatron: every real parameter is
placed by Megatron's layout (pipeline stage from megatron-core's `get_num_layers_to_build`, tensor
split of the projections, expert split over EP x ETP, replicated norms and router) and the fullest
stage is counted. `check_conservation` compares every stage's count with megatron-core's own GPTModel
built for one rank of that stage on meta (megatron_count; Qwen3.5's Gated DeltaNet layers from the
trainer's specs of megatron-core modules), so a module dropped, counted twice, put on the wrong stage
or split by the wrong divisor fails it.

Bytes per parameter (mixed precision as verl runs it): FSDP2 keeps fp32 shards, fp32 gradients and
Adam's two fp32 moments (4 + 4 + 8), plus two bf16 units gathered at a time; Megatron keeps bf16
weights, fp32 main gradients and a distributed optimizer (fp32 master + two moments, 12 bytes,
sharded over data parallel). Offloaded optimizer state is not on the device; offloaded parameters
and gradients are (they come back for the update), so they are counted. Activations: `activations.py`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import activations
from .plan_format import ModelSpec, Plan

GIB = 1024 ** 3
_LAYER = re.compile(r"\.layers\.(\d+)\.")


class MemoryUnavailable(RuntimeError):
    """The installed transformers cannot build this model (too old for Qwen3.5, or no such class)."""


@dataclass
class MemoryEstimate:
    params: int              # parameters this rank holds
    bytes_by_part: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def total(self) -> float:
        return sum(self.bytes_by_part.values())

    def gib(self) -> dict[str, float]:
        return {k: round(v / GIB, 2) for k, v in self.bytes_by_part.items()} | {"total": round(self.total / GIB, 2)}


def build_meta_model(model: ModelSpec):
    """transformers' causal LM for the model's config, on the meta device."""
    import torch

    try:
        from transformers import CONFIG_MAPPING, AutoModelForCausalLM

        config = CONFIG_MAPPING[model.get("model_type")](**model.hf_config)
    except (ImportError, KeyError) as exc:
        import transformers

        raise MemoryUnavailable(f"transformers {transformers.__version__} has no {model.get('model_type')!r}: "
                                f"{exc}") from None
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def layer_stage(name: str, stages: list[int]) -> int | None:
    """The pipeline stage of a decoder-layer parameter (None for parameters outside the layers)."""
    match = _LAYER.search(f".{name}")
    if not match:
        return None
    index, start = int(match.group(1)), 0
    for stage, count in enumerate(stages):
        if index < start + count:
            return stage
        start += count
    raise ValueError(f"layer {index} lies beyond the {sum(stages)} layers the stages build")


def megatron_split(name: str, tp: int, ep: int, etp: int) -> tuple[str, int]:
    """(kind, divisor) of a parameter under Megatron's layout: expert, replicated or tensor-parallel."""
    if ".experts." in name:
        return "expert", ep * etp
    if name.endswith("norm.weight") or ".mlp.gate." in name or "shared_expert_gate" in name:
        return "replicated", 1  # norms, the router and the shared-expert gate are not split
    return "dense", tp


def place(name: str, stages: list[int]) -> int:
    """The pipeline stage holding a parameter: layers by index, embedding first, head and final norm last."""
    stage = layer_stage(name, stages)
    if stage is not None:
        return stage
    return 0 if "embed_tokens" in name else len(stages) - 1


def megatron_per_stage(model, plan: Plan, stages: list[int], split=megatron_split) -> list[dict[str, int]]:
    """Per pipeline stage: parameters one rank of that stage holds, by kind."""
    per = [{"dense": 0, "replicated": 0, "expert": 0} for _ in stages]
    for name, p in model.named_parameters():
        kind, divisor = split(name, plan.tp, plan.ep, plan.etp)
        per[place(name, stages)][kind] += -(-p.numel() // divisor)
    return per


class ConservationError(AssertionError):
    """The estimate's count and megatron-core's own modules disagree: the estimate cannot be trusted."""


def check_conservation(plan: Plan, per_stage: list[dict[str, int]], hf_config=None) -> str:
    """Each stage's count must equal what megatron-core's own modules of one rank of that stage hold
    (megatron_count: built on meta at the real shapes, sharing no divisor or stage rule with the split).
    Raises AssertionError when they differ; returns how it was checked, or why it could not be."""
    from .megatron_count import CountUnavailable, stage_params

    ours = [sum(stage.values()) for stage in per_stage]
    try:
        theirs = stage_params(plan, hf_config)
    except CountUnavailable as exc:
        return f"not checked against megatron-core ({exc})"
    if ours != theirs:
        raise ConservationError(f"the Megatron split counts {ours} parameters per rank by pipeline stage, "
                             f"megatron-core's own modules of one rank hold {theirs}")
    return "per-stage count equal to megatron-core's own modules of one rank"


def megatron_estimate(plan: Plan, stages: list[int], dp: int, expert_dp: int, model=None) -> MemoryEstimate:
    model = model if model is not None else build_meta_model(plan.model)
    per_stage = megatron_per_stage(model, plan, stages)
    checked = check_conservation(plan, per_stage, model.config)
    best = None
    for index, counts in enumerate(per_stage):
        dense, expert = counts["dense"] + counts["replicated"], counts["expert"]
        params = dense + expert
        parts = {"params": 2.0 * params, "grads": 4.0 * params,
                 "optimizer": 0.0 if plan.optimizer_offload else 12.0 * (dense / dp + expert / expert_dp)}
        parts["activations"] = activations.stage_bytes(plan, stages[index], last=index == len(stages) - 1)
        estimate = MemoryEstimate(params, parts, f"pipeline stage {index} of {len(stages)}; {checked}")
        if best is None or estimate.total > best.total:
            best = estimate
    return best


def fsdp_estimate(plan: Plan, model=None) -> MemoryEstimate:
    """Shard the real model with fully_shard on a fake world of the plan's size; count rank 0."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from .megatron_probe import fake_world

    model = model if model is not None else build_meta_model(plan.model)
    layers = list(model.model.layers)
    largest_unit = max(sum(p.numel() for p in layer.parameters()) for layer in layers)
    with fake_world(plan.world_size):
        mesh = init_device_mesh("cpu", (plan.world_size,))
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        local = sum(p.to_local().numel() for p in model.parameters())
    offload = plan.param_offload
    parts = {"params": 0.0 if offload else 4.0 * local, "grads": 0.0 if offload else 4.0 * local,
             "optimizer": 0.0 if (plan.optimizer_offload or offload) else 8.0 * local,
             "gathered_units": 2 * 2.0 * largest_unit,  # bf16: the unit computing and the one prefetched
             "activations": activations.stage_bytes(plan, len(layers), last=True)}
    return MemoryEstimate(local, parts, f"rank 0 of {plan.world_size} (fully_shard per decoder layer)")
