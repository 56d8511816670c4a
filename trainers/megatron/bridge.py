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

import contextlib
import hashlib
import importlib.metadata
import json
import os
import sys
import sysconfig
from pathlib import Path

import torch

from harness.files import write_json_atomic

from . import mapping
from .mapping import is_expert, is_tensor_parallel  # noqa: F401  (the trainer's grad handling uses them)

PROJECT_MAPPING = "project-mapping"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


# A folder where the bridges' answers are kept for the next process of the same environment (the harness sets it
# per run): asking Megatron-Bridge imports it, about 12 s on one CPU core, in every rank of every launch otherwise.
CACHE_VARIABLE = "HARNESS_BRIDGE_SUPPORT_CACHE"
_ANSWERS: dict[str, dict] = {}
BRIDGE_DISTRIBUTIONS = ("mbridge", "megatron-bridge", "megatron-core", "transformers", "torch")


def bridge_support(hf_config) -> dict:
    """Ask each installed bridge whether it maps `hf_config.model_type`; keep their real errors.

    The answer depends on the model type and architectures and on what is installed, so it is asked once per
    environment: kept in this process, and in CACHE_VARIABLE's folder under a key naming the environment, the
    state of its site-packages and the bridges' versions. Not where a Transformer Engine is imported (the
    bridges' answer depends on it) or Megatron-Bridge already is (a Megatron-Bridge job's, under the harness's
    import-only TE stand-in): there asking imports nothing."""
    if "transformer_engine" in sys.modules or "megatron.bridge" in sys.modules:  # or: asking costs no import
        return _ask_bridges(hf_config)
    key = _support_key(hf_config)
    if key not in _ANSWERS:
        _ANSWERS[key] = _read_cached(key) or _write_cached(key, _ask_bridges(hf_config))
    return dict(_ANSWERS[key])


def _support_key(hf_config) -> str:
    site = sysconfig.get_paths()["purelib"]
    try:
        changed = os.stat(site).st_mtime_ns  # an install or removal in the environment changes its folder
    except OSError:
        changed = None
    parts = [sys.prefix, site, changed, hf_config.model_type, list(getattr(hf_config, "architectures", None) or []),
             {name: _version(name) for name in BRIDGE_DISTRIBUTIONS}]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _cache_file(key: str) -> Path | None:
    folder = os.environ.get(CACHE_VARIABLE)
    return Path(folder) / f"{key}.json" if folder else None


def _read_cached(key: str) -> dict | None:
    path = _cache_file(key)
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):  # absent, or unreadable: ask the bridges
        return None


def _write_cached(key: str, report: dict) -> dict:
    path = _cache_file(key)
    if path is not None:
        with contextlib.suppress(OSError):  # a cache that cannot be written costs time, never the answer
            write_json_atomic(path, report)  # whole or not at all: ranks of one launch ask at the same moment
    return report


def _ask_bridges(hf_config) -> dict:
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
    """The bridge that converts this model in this trainer: the project mapping, whatever `report` says.

    A library that claims support is reported (bridge_support), but this trainer's conversion is
    verified only for the project mapping; wiring a library bridge in is future work (see the module doc).
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
