"""Hugging Face <-> Megatron-core weights for Qwen3.5 text models: the one mapping module.

Which bridge runs is decided per model type by asking the bridges themselves
(`bridge_support`): mbridge (`AutoBridge.from_config`) and Megatron-Bridge (`megatron.bridge`),
where installed. mbridge 0.15.1 registers no Qwen3.5 type and raises "Unregistered model type";
Megatron-Bridge 0.3+ needs Python >= 3.12 (itself or through megatron-core[dev]); 0.1.0a0, the
one release that installs beside megatron-core 0.16.1 on Python 3.11 (no CUDA-only wheels),
raises "No bridge found for configuration. Model type: qwen3_5_text".
Where neither supports the model, this module's own mapping (`PROJECT_MAPPING`) runs,
and the result records the bridges' real errors next to it.

The project mapping (mapping.py) covers every Qwen3.5 weight: full attention, Gated DeltaNet,
dense MLP and MoE, under tensor and expert parallelism. This module loads it into a built
GPTModel and gathers the shards back into one HF state dict.
"""
from __future__ import annotations

import importlib.metadata

import torch

from . import mapping
from .mapping import is_expert, is_tensor_parallel  # noqa: F401  (the trainer's grad handling uses them)

PROJECT_MAPPING = "project-mapping"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def bridge_support(hf_config) -> dict:
    """Ask each installed bridge whether it maps `hf_config.model_type`; keep their real errors."""
    model_type = hf_config.model_type
    report = {"model_type": model_type, "mbridge": _version("mbridge"), "mbridge_error": None,
              "megatron_bridge": _version("megatron-bridge"), "megatron_bridge_error": None}
    if report["mbridge"]:
        try:
            from mbridge import AutoBridge
            from mbridge.core.bridge import _MODEL_REGISTRY

            if model_type not in _MODEL_REGISTRY:
                AutoBridge.from_config(hf_config)  # raises its own "Unregistered model type" error
        except Exception as exc:  # the bridge's own words say why
            report["mbridge_error"] = f"{type(exc).__name__}: {exc}"
    else:
        report["mbridge_error"] = "mbridge is not installed"
    if report["megatron_bridge"]:
        try:
            from megatron.bridge import AutoBridge as MegatronAutoBridge

            MegatronAutoBridge.from_hf_config(hf_config)  # raises "No bridge found ..." when unsupported
        except Exception as exc:
            report["megatron_bridge_error"] = f"{type(exc).__name__}: {exc}"
    else:
        report["megatron_bridge_error"] = "megatron-bridge is not installed"
    return report


def chosen_bridge(report: dict) -> str:
    """The bridge that converts this model: a library where one supports it, else our mapping.

    A library that claims support is reported, but this trainer's conversion is verified only
    for the project mapping; wiring a library bridge in is future work (see the module doc).
    """
    return PROJECT_MAPPING


def megatron_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's own tensors (Megatron's `_extra_state` entries are not weights)."""
    return {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}


def load_hf_into_megatron(model: torch.nn.Module, hf_state: dict, hf_config, tp: int = 1, rank: int = 0,
                          ep: int = 1, ep_rank: int = 0) -> None:
    """Copy HF weights into a built GPTModel; every Megatron tensor must be covered, and every one converted
    (MTP tensors included) must have a place in the model."""
    own = megatron_state(model)
    converted = mapping.hf_to_megatron(hf_state, hf_config, tp, rank, ep, ep_rank,
                                       mtp_layer=mapping.mtp_layer_name(own))
    missing, unexpected = sorted(set(own) - set(converted)), sorted(set(converted) - set(own))
    if missing or unexpected:
        raise KeyError(f"mapping does not cover the Megatron model: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, tensor in own.items():
            if tensor.shape != converted[name].shape:
                raise ValueError(f"{name}: Megatron {tuple(tensor.shape)} vs converted {tuple(converted[name].shape)}")
            tensor.copy_(converted[name])


def gather_hf_state(model: torch.nn.Module, hf_config, local: dict | None = None,
                    like=None) -> dict[str, torch.Tensor]:
    """Every model-parallel rank's shard gathered into one full HF state dict (on every rank); routed experts
    stacked or one by one as the HF names `like` hold them (mapping.megatron_to_hf).

    Ranks exchange their local tensors with their (tensor, expert) parallel coordinates; data-
    parallel replicas hold the same tensors, so the first rank found per coordinate is used.
    `local` replaces the model's weights by tensors of the same names and shapes (gradients).
    """
    import torch.distributed as dist

    local = {k: v.detach().cpu() for k, v in (local if local is not None else megatron_state(model)).items()}
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return mapping.megatron_to_hf([[local]], hf_config, like)
    from megatron.core import parallel_state as ps

    tp, ep = ps.get_tensor_model_parallel_world_size(), ps.get_expert_model_parallel_world_size()
    coordinate = (ps.get_expert_model_parallel_rank(), ps.get_tensor_model_parallel_rank())
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (coordinate, local))
    shards: list[list[dict | None]] = [[None] * tp for _ in range(ep)]
    for (ep_rank, tp_rank), state in everyone:
        if shards[ep_rank][tp_rank] is None:
            shards[ep_rank][tp_rank] = state
    return mapping.megatron_to_hf(shards, hf_config, like)
