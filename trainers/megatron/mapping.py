"""The project's Hugging Face <-> megatron-core mapping for every Qwen3.5 weight (text and MoE).

Megatron's layout (layer_specs.py), per tensor-parallel rank r of `tp`, expert-parallel rank e of `ep`:
- full attention `linear_qkv`: per query group g, [q heads of g, their output gates, k_g, v_g];
  HF's q_proj interleaves per head [q_h, gate_h]. Tensor parallelism splits whole groups.
- Gated DeltaNet `in_proj`: rank r holds [q_r, k_r, v_r, z_r, b_r, a_r], each part the r-th
  contiguous slice of HF's in_proj_qkv (q, k, v: head-major), in_proj_z, in_proj_b, in_proj_a, so
  rank r owns key heads r*nk/tp.. and value heads r*nv/tp..; `conv1d` likewise [q_r, k_r, v_r];
  `A_log`, `dt_bias` split by value head; the gated norm is per head, replicated.
- SwiGLU `linear_fc1` (dense MLP, each expert, the shared expert): [gate_r; up_r].
- MoE: `router.weight` = HF `mlp.gate.weight`; expert x = e * E/ep + j is rank e's local expert j,
  taken from HF's stacked `experts.gate_up_proj[x]` / `experts.down_proj[x]`; the shared expert's
  gate (`shared_experts.gate_weight`) = HF `shared_expert_gate.weight`.
- row-parallel weights split along dim 1, embeddings and lm_head along the vocabulary, norms
  replicated. Every step is a copy or a concatenation, so HF -> Megatron -> HF is bitwise exact.
"""
from __future__ import annotations

import torch

# Megatron name suffix -> dim it is split along over tensor-parallel ranks (absent: replicated).
_SPLIT_DIM = {"embedding.word_embeddings.weight": 0, "output_layer.weight": 0,
              "self_attention.linear_proj.weight": 1, "mlp.linear_fc2.weight": 1, "linear_fc2.weight": 1,
              "self_attention.out_proj.weight": 1, "self_attention.A_log": 0, "self_attention.dt_bias": 0,
              "self_attention.linear_qkv.weight": 0, "self_attention.in_proj.weight": 0,
              "self_attention.conv1d.weight": 0, "linear_fc1.weight": 0}


def is_tensor_parallel(megatron_name: str) -> bool:
    """True for tensors split over tensor-parallel ranks; the rest (norms, router, gates) are replicated.

    Named here because megatron-core sets its `tensor_model_parallel` attribute only while it
    initialises weights, which this project skips (the weights come from HF)."""
    return megatron_name.endswith(tuple(_SPLIT_DIM))


def is_expert(megatron_name: str) -> bool:
    """Routed experts' weights: each lives on one expert-parallel rank only."""
    return ".mlp.experts.local_experts." in megatron_name


def _heads(c) -> tuple[int, int, int]:
    return c.num_attention_heads, c.num_key_value_heads, c.head_dim


def _gdn_parts(c) -> list[int]:
    """Row counts of HF's GDN projections in Megatron's in_proj order: q, k, v, z, b, a."""
    key, value = c.linear_key_head_dim * c.linear_num_key_heads, c.linear_value_head_dim * c.linear_num_value_heads
    return [key, key, value, value, c.linear_num_value_heads, c.linear_num_value_heads]


def check_sizes(c, tp: int, ep: int = 1) -> None:
    values = {"num_key_value_heads": c.num_key_value_heads, "num_attention_heads": c.num_attention_heads,
              "vocab_size": c.vocab_size}
    for key in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                "linear_num_key_heads", "linear_num_value_heads"):
        if getattr(c, key, None):
            values[key] = getattr(c, key)
    problems = [f"{name}={value} does not split over tensor-parallel size {tp}"
                for name, value in values.items() if value % tp]
    if ep > 1 and (getattr(c, "num_experts", None) or 0) % ep:
        problems.append(f"num_experts={getattr(c, 'num_experts', None)} does not split over expert-parallel size {ep}")
    if problems:
        raise ValueError("; ".join(problems))


# --- fused tensors -------------------------------------------------------------------------------

def fuse_per_rank(parts: list[torch.Tensor], tp: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s slice of every part, concatenated: [p0_r, p1_r, ...]."""
    return torch.cat([part.chunk(tp, dim=0)[rank] for part in parts], dim=0)


def unfuse_per_rank(shards: list[torch.Tensor], rows: list[int]) -> list[torch.Tensor]:
    """The inverse of `fuse_per_rank` over all ranks: the full parts, given their row counts."""
    tp = len(shards)
    pieces = [shard.split([r // tp for r in rows], dim=0) for shard in shards]
    return [torch.cat([piece[k] for piece in pieces], dim=0) for k in range(len(rows))]


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


def fuse_gdn_in_proj(qkv: torch.Tensor, z: torch.Tensor, b: torch.Tensor, a: torch.Tensor, hf_config,
                     tp: int, rank: int) -> torch.Tensor:
    """HF in_proj_qkv/z/b/a -> this rank's Megatron in_proj [q_r, k_r, v_r, z_r, b_r, a_r]."""
    q, k, v = qkv.split(_gdn_parts(hf_config)[:3], dim=0)
    return fuse_per_rank([q, k, v, z, b, a], tp, rank)


def split_gdn_in_proj(shards: list[torch.Tensor], hf_config) -> tuple[torch.Tensor, ...]:
    """Every rank's in_proj -> HF (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a)."""
    q, k, v, z, b, a = unfuse_per_rank(shards, _gdn_parts(hf_config))
    return torch.cat([q, k, v], dim=0), z, b, a


# --- one-to-one tensors --------------------------------------------------------------------------

def direct_map(c) -> dict[str, str]:
    """Megatron name -> HF name for tensors that are copied or split (not fused), all layers."""
    mapping = {"embedding.word_embeddings.weight": "model.embed_tokens.weight",
               "decoder.final_layernorm.weight": "model.norm.weight"}
    if not c.tie_word_embeddings:
        mapping["output_layer.weight"] = "lm_head.weight"
    moe = bool(getattr(c, "num_experts", None))
    for i, kind in enumerate(c.layer_types or ["full_attention"] * c.num_hidden_layers):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        mapping[mc + "input_layernorm.weight"] = hf + "input_layernorm.weight"
        mapping[mc + "pre_mlp_layernorm.weight"] = hf + "post_attention_layernorm.weight"
        if kind == "linear_attention":
            for mc_name, hf_name in (("A_log", "A_log"), ("dt_bias", "dt_bias"), ("out_norm.weight", "norm.weight"),
                                     ("out_proj.weight", "out_proj.weight")):
                mapping[mc + "self_attention." + mc_name] = hf + "linear_attn." + hf_name
        else:
            mapping[mc + "self_attention.q_layernorm.weight"] = hf + "self_attn.q_norm.weight"
            mapping[mc + "self_attention.k_layernorm.weight"] = hf + "self_attn.k_norm.weight"
            mapping[mc + "self_attention.linear_proj.weight"] = hf + "self_attn.o_proj.weight"
        if moe:
            mapping[mc + "mlp.router.weight"] = hf + "mlp.gate.weight"
            mapping[mc + "mlp.shared_experts.gate_weight"] = hf + "mlp.shared_expert_gate.weight"
            mapping[mc + "mlp.shared_experts.linear_fc2.weight"] = hf + "mlp.shared_expert.down_proj.weight"
        else:
            mapping[mc + "mlp.linear_fc2.weight"] = hf + "mlp.down_proj.weight"
    return mapping


def split_dim(megatron_name: str) -> int | None:
    return next((dim for suffix, dim in _SPLIT_DIM.items() if megatron_name.endswith(suffix)), None)


def _kinds(c) -> list[str]:
    return list(c.layer_types or ["full_attention"] * c.num_hidden_layers)


def _experts(c) -> int:
    return int(getattr(c, "num_experts", None) or 0)


# --- whole state dicts ---------------------------------------------------------------------------

def hf_to_megatron(hf_state: dict, c, tp: int = 1, rank: int = 0, ep: int = 1, ep_rank: int = 0) -> dict:
    """The Megatron state dict of tensor-parallel rank `rank`, expert-parallel rank `ep_rank`."""
    check_sizes(c, tp, ep)
    out = {}
    for mc_name, hf_name in direct_map(c).items():
        dim = split_dim(mc_name)
        tensor = hf_state[hf_name]
        out[mc_name] = (tensor if dim is None else tensor.chunk(tp, dim=dim)[rank]).clone()
    for i, kind in enumerate(_kinds(c)):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        if kind == "linear_attention":
            la = hf + "linear_attn."
            out[mc + "self_attention.in_proj.weight"] = fuse_gdn_in_proj(
                hf_state[la + "in_proj_qkv.weight"], hf_state[la + "in_proj_z.weight"],
                hf_state[la + "in_proj_b.weight"], hf_state[la + "in_proj_a.weight"], c, tp, rank)
            conv = hf_state[la + "conv1d.weight"].split(_gdn_parts(c)[:3], dim=0)
            out[mc + "self_attention.conv1d.weight"] = fuse_per_rank(list(conv), tp, rank)
        else:
            qkv = fuse_qkv(hf_state[hf + "self_attn.q_proj.weight"], hf_state[hf + "self_attn.k_proj.weight"],
                           hf_state[hf + "self_attn.v_proj.weight"], c)
            out[mc + "self_attention.linear_qkv.weight"] = qkv.chunk(tp, dim=0)[rank].clone()
        if _experts(c):
            shared = hf + "mlp.shared_expert."
            out[mc + "mlp.shared_experts.linear_fc1.weight"] = fuse_per_rank(
                [hf_state[shared + "gate_proj.weight"], hf_state[shared + "up_proj.weight"]], tp, rank)
            local = _experts(c) // ep
            for j in range(local):
                expert = ep_rank * local + j
                fc1 = hf_state[hf + "mlp.experts.gate_up_proj"][expert]
                fc2 = hf_state[hf + "mlp.experts.down_proj"][expert]
                name = mc + f"mlp.experts.local_experts.{j}."
                out[name + "linear_fc1.weight"] = fuse_per_rank(list(fc1.chunk(2, dim=0)), tp, rank)
                out[name + "linear_fc2.weight"] = fc2.chunk(tp, dim=1)[rank].clone()
        else:
            out[mc + "mlp.linear_fc1.weight"] = fuse_per_rank(
                [hf_state[hf + "mlp.gate_proj.weight"], hf_state[hf + "mlp.up_proj.weight"]], tp, rank)
    return out


def megatron_to_hf(shards: list[list[dict]], c) -> dict[str, torch.Tensor]:
    """A full HF state dict from every rank's Megatron state dict: `shards[ep_rank][tp_rank]`."""
    ep = len(shards)
    first = shards[0]  # tensors outside the experts are the same on every expert-parallel rank

    def cat(name: str, dim: int) -> torch.Tensor:
        return torch.cat([s[name] for s in first], dim=dim)

    out = {}
    for mc_name, hf_name in direct_map(c).items():
        dim = split_dim(mc_name)
        out[hf_name] = first[0][mc_name].clone() if dim is None else cat(mc_name, dim)
    for i, kind in enumerate(_kinds(c)):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        if kind == "linear_attention":
            la = hf + "linear_attn."
            qkv, z, b, a = split_gdn_in_proj([s[mc + "self_attention.in_proj.weight"] for s in first], c)
            out[la + "in_proj_qkv.weight"], out[la + "in_proj_z.weight"] = qkv, z
            out[la + "in_proj_b.weight"], out[la + "in_proj_a.weight"] = b, a
            conv = unfuse_per_rank([s[mc + "self_attention.conv1d.weight"] for s in first], _gdn_parts(c)[:3])
            out[la + "conv1d.weight"] = torch.cat(conv, dim=0)
        else:
            q, k, v = split_qkv(cat(mc + "self_attention.linear_qkv.weight", 0), c)
            out[hf + "self_attn.q_proj.weight"], out[hf + "self_attn.k_proj.weight"] = q, k
            out[hf + "self_attn.v_proj.weight"] = v
        if _experts(c):
            shared = hf + "mlp.shared_expert."
            gate, up = unfuse_per_rank([s[mc + "mlp.shared_experts.linear_fc1.weight"] for s in first],
                                       [c.shared_expert_intermediate_size] * 2)
            out[shared + "gate_proj.weight"], out[shared + "up_proj.weight"] = gate, up
            fc1s, fc2s = [], []
            for per_tp in shards:  # expert-parallel ranks in order: their local experts are consecutive
                for j in range(_experts(c) // ep):
                    name = mc + f"mlp.experts.local_experts.{j}."
                    fc1s.append(torch.cat(unfuse_per_rank([s[name + "linear_fc1.weight"] for s in per_tp],
                                                          [c.moe_intermediate_size] * 2), dim=0))
                    fc2s.append(torch.cat([s[name + "linear_fc2.weight"] for s in per_tp], dim=1))
            out[hf + "mlp.experts.gate_up_proj"] = torch.stack(fc1s)
            out[hf + "mlp.experts.down_proj"] = torch.stack(fc2s)
        else:
            gate, up = unfuse_per_rank([s[mc + "mlp.linear_fc1.weight"] for s in first], [c.intermediate_size] * 2)
            out[hf + "mlp.gate_proj.weight"], out[hf + "mlp.up_proj.weight"] = gate, up
    if c.tie_word_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out
