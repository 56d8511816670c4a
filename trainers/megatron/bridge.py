"""Hugging Face <-> Megatron-core weights for Qwen3.5 text models: the one mapping module.

Which bridge runs is decided per model type by asking the bridges themselves
(`bridge_support`): mbridge (`AutoBridge.from_config`) and Megatron-Bridge (`megatron.bridge`),
where installed. mbridge 0.15.1 registers no Qwen3.5 type and raises "Unregistered model type";
Megatron-Bridge 0.3+ needs Python >= 3.12 (itself or through megatron-core[dev]); 0.1.0a0, the
one release that installs beside megatron-core 0.16.1 on Python 3.11 (no CUDA-only wheels),
raises "No bridge found for configuration. Model type: qwen3_5_text".
Where neither supports the model, this module's own mapping (`PROJECT_MAPPING`) runs,
and the result records the bridges' real errors next to it.

The mapping covers Qwen3.5's full-attention decoder (Megatron's local GPT spec, see model.py):
- linear_qkv: per query group g, [q heads of g, their output gates, k_g, v_g]; HF's q_proj
  interleaves per head [q_h, gate_h]. Tensor parallelism splits whole groups.
- linear_fc1: [gate_proj; up_proj], each split over tensor-parallel ranks before concatenation.
- row-parallel weights (o_proj, down_proj) split along dim 1; embeddings and lm_head along
  the vocabulary; norms replicated. Every step is a copy, so HF -> Megatron -> HF is bitwise exact.
Gated DeltaNet weights are not mapped: megatron-core cannot build that layer here (model.py).
"""
from __future__ import annotations

import importlib.metadata

import torch

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
        except Exception as exc:  # the bridge's own words are the evidence
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


# --- the mapping ------------------------------------------------------------------------------

def _heads(hf_config) -> tuple[int, int, int]:
    return hf_config.num_attention_heads, hf_config.num_key_value_heads, hf_config.head_dim


def _check_tp(hf_config, tp: int) -> None:
    heads, groups, _ = _heads(hf_config)
    for name, value in (("num_key_value_heads", groups), ("num_attention_heads", heads),
                        ("intermediate_size", hf_config.intermediate_size), ("vocab_size", hf_config.vocab_size)):
        if value % tp:
            raise ValueError(f"{name}={value} does not split over tensor-parallel size {tp}")


def fuse_qkv(q_proj: torch.Tensor, k_proj: torch.Tensor, v_proj: torch.Tensor, hf_config) -> torch.Tensor:
    """HF q_proj (heads x [q, gate]), k_proj, v_proj -> Megatron linear_qkv (groups x [q.., gate.., k, v])."""
    heads, groups, dim = _heads(hf_config)
    per_group = heads // groups
    q_and_gate = q_proj.reshape(groups, per_group, 2, dim, -1)
    query = q_and_gate[:, :, 0].reshape(groups, per_group * dim, -1)
    gate = q_and_gate[:, :, 1].reshape(groups, per_group * dim, -1)
    key = k_proj.reshape(groups, dim, -1)
    value = v_proj.reshape(groups, dim, -1)
    return torch.cat([query, gate, key, value], dim=1).reshape(-1, q_proj.shape[-1])


def split_qkv(linear_qkv: torch.Tensor, hf_config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inverse of `fuse_qkv`."""
    heads, groups, dim = _heads(hf_config)
    per_group = heads // groups
    fused = linear_qkv.reshape(groups, (2 * per_group + 2) * dim, -1)
    query, gate, key, value = torch.split(fused, [per_group * dim, per_group * dim, dim, dim], dim=1)
    q_and_gate = torch.stack([query.reshape(groups, per_group, dim, -1), gate.reshape(groups, per_group, dim, -1)],
                             dim=2)
    width = linear_qkv.shape[-1]
    return q_and_gate.reshape(-1, width), key.reshape(-1, width), value.reshape(-1, width)


def _layer_map(i: int) -> dict[str, str]:
    """Megatron name -> HF name for the one-to-one (copied or split) tensors of layer i."""
    hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
    return {
        mc + "input_layernorm.weight": hf + "input_layernorm.weight",
        mc + "self_attention.q_layernorm.weight": hf + "self_attn.q_norm.weight",
        mc + "self_attention.k_layernorm.weight": hf + "self_attn.k_norm.weight",
        mc + "self_attention.linear_proj.weight": hf + "self_attn.o_proj.weight",
        mc + "pre_mlp_layernorm.weight": hf + "post_attention_layernorm.weight",
        mc + "mlp.linear_fc2.weight": hf + "mlp.down_proj.weight",
    }


# How a one-to-one tensor is split over tensor-parallel ranks: None replicated, else the dim.
_SPLIT_DIM = {"embedding.word_embeddings.weight": 0, "output_layer.weight": 0,
              "self_attention.linear_proj.weight": 1, "mlp.linear_fc2.weight": 1}


_SHARDED = ("embedding.word_embeddings.weight", "output_layer.weight", "self_attention.linear_qkv.weight",
            "self_attention.linear_proj.weight", "mlp.linear_fc1.weight", "mlp.linear_fc2.weight")


def is_tensor_parallel(megatron_name: str) -> bool:
    """True for tensors split over tensor-parallel ranks; the rest (norms) are replicated.

    Named here because megatron-core sets its `tensor_model_parallel` attribute only while it
    initialises weights, which this project skips (the weights come from HF)."""
    return megatron_name.endswith(_SHARDED)


def _split_dim(megatron_name: str) -> int | None:
    return next((dim for suffix, dim in _SPLIT_DIM.items() if megatron_name.endswith(suffix)), None)


def _direct_map(hf_config) -> dict[str, str]:
    mapping = {"embedding.word_embeddings.weight": "model.embed_tokens.weight",
               "decoder.final_layernorm.weight": "model.norm.weight"}
    if not hf_config.tie_word_embeddings:
        mapping["output_layer.weight"] = "lm_head.weight"
    for i in range(hf_config.num_hidden_layers):
        mapping.update(_layer_map(i))
    return mapping


def _require_full_attention(hf_config) -> None:
    kinds = list(getattr(hf_config, "layer_types", None) or [])
    if any(kind != "full_attention" for kind in kinds):
        raise NotImplementedError(f"layer_types {kinds}: only full-attention layers are mapped to Megatron")


def hf_to_megatron(hf_state: dict, hf_config, tp: int = 1, rank: int = 0) -> dict[str, torch.Tensor]:
    """This tensor-parallel rank's Megatron state dict from a full HF state dict."""
    _require_full_attention(hf_config)
    _check_tp(hf_config, tp)
    out = {}
    for mc_name, hf_name in _direct_map(hf_config).items():
        dim = _split_dim(mc_name)
        tensor = hf_state[hf_name]
        out[mc_name] = (tensor if dim is None else tensor.chunk(tp, dim=dim)[rank]).clone()
    for i in range(hf_config.num_hidden_layers):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = fuse_qkv(hf_state[hf + "self_attn.q_proj.weight"], hf_state[hf + "self_attn.k_proj.weight"],
                       hf_state[hf + "self_attn.v_proj.weight"], hf_config)
        out[mc + "self_attention.linear_qkv.weight"] = qkv.chunk(tp, dim=0)[rank].clone()
        gate = hf_state[hf + "mlp.gate_proj.weight"].chunk(tp, dim=0)[rank]
        up = hf_state[hf + "mlp.up_proj.weight"].chunk(tp, dim=0)[rank]
        out[mc + "mlp.linear_fc1.weight"] = torch.cat([gate, up], dim=0)
    return out


def megatron_to_hf(shards: list[dict[str, torch.Tensor]], hf_config) -> dict[str, torch.Tensor]:
    """A full HF state dict from every tensor-parallel rank's Megatron state dict (rank order)."""
    _require_full_attention(hf_config)
    tp = len(shards)
    out = {}
    for mc_name, hf_name in _direct_map(hf_config).items():
        dim = _split_dim(mc_name)
        out[hf_name] = shards[0][mc_name].clone() if dim is None else torch.cat([s[mc_name] for s in shards], dim=dim)
    for i in range(hf_config.num_hidden_layers):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        qkv = torch.cat([s[mc + "self_attention.linear_qkv.weight"] for s in shards], dim=0)
        q_proj, k_proj, v_proj = split_qkv(qkv, hf_config)
        out[hf + "self_attn.q_proj.weight"], out[hf + "self_attn.k_proj.weight"] = q_proj, k_proj
        out[hf + "self_attn.v_proj.weight"] = v_proj
        gates, ups = zip(*(s[mc + "mlp.linear_fc1.weight"].chunk(2, dim=0) for s in shards))
        out[hf + "mlp.gate_proj.weight"] = torch.cat(gates, dim=0)
        out[hf + "mlp.up_proj.weight"] = torch.cat(ups, dim=0)
    if tp and hf_config.tie_word_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def megatron_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's own tensors (Megatron's `_extra_state` entries are not weights)."""
    return {k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}


def load_hf_into_megatron(model: torch.nn.Module, hf_state: dict, hf_config, tp: int = 1, rank: int = 0) -> None:
    """Copy HF weights into a built GPTModel; every Megatron tensor must be covered."""
    converted = hf_to_megatron(hf_state, hf_config, tp, rank)
    own = megatron_state(model)
    missing, unexpected = sorted(set(own) - set(converted)), sorted(set(converted) - set(own))
    if missing or unexpected:
        raise KeyError(f"mapping does not cover the Megatron model: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, tensor in own.items():
            if tensor.shape != converted[name].shape:
                raise ValueError(f"{name}: Megatron {tuple(tensor.shape)} vs converted {tuple(converted[name].shape)}")
            tensor.copy_(converted[name])


def gather_hf_state(model: torch.nn.Module, hf_config, tp_group=None) -> dict[str, torch.Tensor]:
    """Every tensor-parallel rank's shard gathered into one full HF state dict (on every rank)."""
    import torch.distributed as dist

    local = {k: v.detach() for k, v in megatron_state(model).items()}
    tp = dist.get_world_size(tp_group) if dist.is_initialized() else 1
    if tp == 1:
        return megatron_to_hf([local], hf_config)
    shards = [dict() for _ in range(tp)]
    for name, tensor in local.items():
        parts = [torch.empty_like(tensor) for _ in range(tp)]
        dist.all_gather(parts, tensor.contiguous(), group=tp_group)
        for shard, part in zip(shards, parts):
            shard[name] = part
    return megatron_to_hf(shards, hf_config)
