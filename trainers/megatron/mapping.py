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
- multi-token prediction (trainers/mtp.py has the released layout): megatron-core's MTP block
  (`mtp_num_layers`, 0.16.1+) holds one MultiTokenPredictionLayer per MTP layer: `eh_proj` = `mtp.fc`
  (column-parallel, split along dim 0; both take [embedding; hidden state]), `enorm` / `hnorm` /
  `final_layernorm` = `mtp.pre_fc_norm_embedding` / `pre_fc_norm_hidden` / `norm`, and its decoder layer
  (`transformer_layer` in 0.16.1, `mtp_model_layer` later) = `mtp.layers.{k}.*`, mapped as a full-attention
  decoder layer. Routed experts come back one by one or stacked, as the source names had them (`like`).
  An HF state with `mtp.*` tensors asks for the MTP layers; a model without an MTP block then refuses it
  (bridge.load_hf_into_megatron names the unexpected tensors) rather than dropping them.
"""
from __future__ import annotations

import torch

# Megatron name suffix -> dim it is split along over tensor-parallel ranks (absent: replicated).
_SPLIT_DIM = {"embedding.word_embeddings.weight": 0, "output_layer.weight": 0,
              "self_attention.linear_proj.weight": 1, "mlp.linear_fc2.weight": 1, "linear_fc2.weight": 1,
              "self_attention.out_proj.weight": 1, "self_attention.A_log": 0, "self_attention.dt_bias": 0,
              "self_attention.linear_qkv.weight": 0, "self_attention.in_proj.weight": 0,
              "self_attention.conv1d.weight": 0, "linear_fc1.weight": 0, "eh_proj.weight": 0}
# The MTP layer's tensors outside its decoder layer: megatron-core's MultiTokenPredictionLayer (layer 0) -> HF
# (released checkpoints' shared `mtp.fc` and norms).
MTP_SHARED = {"mtp.layers.0.eh_proj.weight": "mtp.fc.weight",
              "mtp.layers.0.enorm.weight": "mtp.pre_fc_norm_embedding.weight",
              "mtp.layers.0.hnorm.weight": "mtp.pre_fc_norm_hidden.weight",
              "mtp.layers.0.final_layernorm.weight": "mtp.norm.weight"}
# megatron-core's attribute for an MTP layer's decoder layer: `transformer_layer` (0.16.1), `mtp_model_layer`
# in later releases (0.19.2); the Megatron model's own names say which (mtp_layer_name).
MTP_LAYER_NAMES = ("transformer_layer", "mtp_model_layer")
MTP_LAYER = MTP_LAYER_NAMES[0]


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

def _layer_map(hf: str, mc: str, kind: str, moe: bool) -> dict[str, str]:
    """Megatron name -> HF name of one decoder layer's copied or split (not fused) tensors."""
    mapping = {mc + "input_layernorm.weight": hf + "input_layernorm.weight",
               mc + "pre_mlp_layernorm.weight": hf + "post_attention_layernorm.weight"}
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


def direct_map(c, mtp: int = 0, mtp_layer: str = MTP_LAYER) -> dict[str, str]:
    """Megatron name -> HF name for tensors that are copied or split (not fused), all layers, and the `mtp`
    MTP layers' (their decoder layer under megatron-core's attribute `mtp_layer`)."""
    mapping = {"embedding.word_embeddings.weight": "model.embed_tokens.weight",
               "decoder.final_layernorm.weight": "model.norm.weight"}
    if not c.tie_word_embeddings:
        mapping["output_layer.weight"] = "lm_head.weight"
    moe = bool(_experts(c))
    for i, kind in enumerate(_kinds(c)):
        mapping.update(_layer_map(f"model.layers.{i}.", f"decoder.layers.{i}.", kind, moe))
    if mtp:
        mapping.update(MTP_SHARED)
    for k in range(mtp):
        mapping.update(_layer_map(f"mtp.layers.{k}.", f"mtp.layers.{k}.{mtp_layer}.", "full_attention", moe))
    return mapping


def split_dim(megatron_name: str) -> int | None:
    return next((dim for suffix, dim in _SPLIT_DIM.items() if megatron_name.endswith(suffix)), None)


def _kinds(c) -> list[str]:
    return list(c.layer_types or ["full_attention"] * c.num_hidden_layers)


def _experts(c) -> int:
    return int(getattr(c, "num_experts", None) or 0)


# --- multi-token prediction (MTP) ----------------------------------------------------------------

def mtp_layers_in(names) -> int:
    """How many MTP layers a state dict holds (HF `mtp.layers.{k}.*` or Megatron `mtp.layers.{k}.*`)."""
    names = [n for n in names if n.startswith("mtp.")]
    found = {int(n.split(".")[2]) for n in names if n.startswith("mtp.layers.") and n.split(".")[2].isdigit()}
    # MTP tensors without a layer still ask for one, so that the missing layer's tensors are named, not skipped
    count = max(found) + 1 if found else int(bool(names))
    if count > 1:  # HF's fc and norms serve every MTP layer; megatron-core's MTP layer has its own
        raise NotImplementedError(f"{count} MTP layers: released Qwen3.5 checkpoints hold one, whose mtp.fc and "
                                  "norms megatron-core keeps per layer; more than one is not mapped")
    return count


def mtp_layer_name(megatron_names) -> str:
    """megatron-core's attribute for an MTP layer's decoder layer, read from a Megatron state dict's names
    (MTP_LAYER where it holds no MTP layer)."""
    for name in megatron_names:
        parts = name.split(".")
        if name.startswith("mtp.layers.") and len(parts) > 4 and parts[3] in MTP_LAYER_NAMES:
            return parts[3]
    return MTP_LAYER


def _expert_fc(hf_state: dict, hf: str, expert: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One routed expert's ([gate; up], down) from a stacked (`experts.gate_up_proj`) or per-expert checkpoint."""
    if hf + "mlp.experts.gate_up_proj" in hf_state:
        return hf_state[hf + "mlp.experts.gate_up_proj"][expert], hf_state[hf + "mlp.experts.down_proj"][expert]
    one = f"{hf}mlp.experts.{expert}."
    return (torch.cat([hf_state[one + "gate_proj.weight"], hf_state[one + "up_proj.weight"]], dim=0),
            hf_state[one + "down_proj.weight"])


# --- whole state dicts ---------------------------------------------------------------------------

def _layer_to_megatron(hf_state: dict, c, hf: str, mc: str, kind: str, tp: int, rank: int, ep: int,
                       ep_rank: int) -> dict:
    """One decoder layer's fused tensors on tensor-parallel rank `rank`, expert-parallel rank `ep_rank`."""
    out = {}
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
    if not _experts(c):
        out[mc + "mlp.linear_fc1.weight"] = fuse_per_rank(
            [hf_state[hf + "mlp.gate_proj.weight"], hf_state[hf + "mlp.up_proj.weight"]], tp, rank)
        return out
    shared = hf + "mlp.shared_expert."
    out[mc + "mlp.shared_experts.linear_fc1.weight"] = fuse_per_rank(
        [hf_state[shared + "gate_proj.weight"], hf_state[shared + "up_proj.weight"]], tp, rank)
    local = _experts(c) // ep
    for j in range(local):
        fc1, fc2 = _expert_fc(hf_state, hf, ep_rank * local + j)
        name = mc + f"mlp.experts.local_experts.{j}."
        out[name + "linear_fc1.weight"] = fuse_per_rank(list(fc1.chunk(2, dim=0)), tp, rank)
        out[name + "linear_fc2.weight"] = fc2.chunk(tp, dim=1)[rank].clone()
    return out


def hf_to_megatron(hf_state: dict, c, tp: int = 1, rank: int = 0, ep: int = 1, ep_rank: int = 0,
                   mtp_layer: str = MTP_LAYER) -> dict:
    """The Megatron state dict of tensor-parallel rank `rank`, expert-parallel rank `ep_rank`; with the MTP
    layers where `hf_state` holds `mtp.*` tensors (their decoder layer under megatron-core's `mtp_layer`)."""
    check_sizes(c, tp, ep)
    mtp = mtp_layers_in(hf_state)
    out = {}
    for mc_name, hf_name in direct_map(c, mtp, mtp_layer).items():
        dim = split_dim(mc_name)
        tensor = hf_state[hf_name]
        out[mc_name] = (tensor if dim is None else tensor.chunk(tp, dim=dim)[rank]).clone()
    layers = [(f"model.layers.{i}.", f"decoder.layers.{i}.", kind) for i, kind in enumerate(_kinds(c))]
    layers += [(f"mtp.layers.{k}.", f"mtp.layers.{k}.{mtp_layer}.", "full_attention") for k in range(mtp)]
    for hf, mc, kind in layers:
        out.update(_layer_to_megatron(hf_state, c, hf, mc, kind, tp, rank, ep, ep_rank))
    return out


def _layer_to_hf(shards: list[list[dict]], c, hf: str, mc: str, kind: str, per_expert: bool) -> dict:
    """One decoder layer's fused tensors gathered from every rank into HF's; routed experts stacked
    (`experts.gate_up_proj`) or, with `per_expert`, one by one."""
    first, out = shards[0], {}
    if kind == "linear_attention":
        la = hf + "linear_attn."
        qkv, z, b, a = split_gdn_in_proj([s[mc + "self_attention.in_proj.weight"] for s in first], c)
        out[la + "in_proj_qkv.weight"], out[la + "in_proj_z.weight"] = qkv, z
        out[la + "in_proj_b.weight"], out[la + "in_proj_a.weight"] = b, a
        conv = unfuse_per_rank([s[mc + "self_attention.conv1d.weight"] for s in first], _gdn_parts(c)[:3])
        out[la + "conv1d.weight"] = torch.cat(conv, dim=0)
    else:
        q, k, v = split_qkv(torch.cat([s[mc + "self_attention.linear_qkv.weight"] for s in first], dim=0), c)
        out[hf + "self_attn.q_proj.weight"], out[hf + "self_attn.k_proj.weight"] = q, k
        out[hf + "self_attn.v_proj.weight"] = v
    if not _experts(c):
        gate, up = unfuse_per_rank([s[mc + "mlp.linear_fc1.weight"] for s in first], [c.intermediate_size] * 2)
        out[hf + "mlp.gate_proj.weight"], out[hf + "mlp.up_proj.weight"] = gate, up
        return out
    shared = hf + "mlp.shared_expert."
    gate, up = unfuse_per_rank([s[mc + "mlp.shared_experts.linear_fc1.weight"] for s in first],
                               [c.shared_expert_intermediate_size] * 2)
    out[shared + "gate_proj.weight"], out[shared + "up_proj.weight"] = gate, up
    fc1s, fc2s = [], []
    for per_tp in shards:  # expert-parallel ranks in order: their local experts are consecutive
        for j in range(_experts(c) // len(shards)):
            name = mc + f"mlp.experts.local_experts.{j}."
            fc1s.append(torch.cat(unfuse_per_rank([s[name + "linear_fc1.weight"] for s in per_tp],
                                                  [c.moe_intermediate_size] * 2), dim=0))
            fc2s.append(torch.cat([s[name + "linear_fc2.weight"] for s in per_tp], dim=1))
    if not per_expert:
        out[hf + "mlp.experts.gate_up_proj"], out[hf + "mlp.experts.down_proj"] = torch.stack(fc1s), torch.stack(fc2s)
        return out
    for e, (fc1, fc2) in enumerate(zip(fc1s, fc2s)):
        one = f"{hf}mlp.experts.{e}."
        out[one + "gate_proj.weight"], out[one + "up_proj.weight"] = fc1.chunk(2, dim=0)
        out[one + "down_proj.weight"] = fc2
    return out


def megatron_to_hf(shards: list[list[dict]], c, like=None) -> dict[str, torch.Tensor]:
    """A full HF state dict from every rank's Megatron state dict: `shards[ep_rank][tp_rank]`, MTP layers
    included where the shards hold them. Routed experts come back as the HF names `like` holds them, per layer
    (a checkpoint: one by one, or stacked); without `like`, as transformers holds the decoder's (stacked) and
    Qwen3.5 stores the MTP layers' (one by one)."""
    first = shards[0]  # tensors outside the experts are the same on every expert-parallel rank
    mtp, mtp_layer = mtp_layers_in(first[0]), mtp_layer_name(first[0])
    names = set(like) if like is not None else None

    def per_expert(hf: str) -> bool:
        return hf.startswith("mtp.") if names is None else f"{hf}mlp.experts.0.gate_proj.weight" in names

    out = {}
    for mc_name, hf_name in direct_map(c, mtp, mtp_layer).items():
        dim = split_dim(mc_name)
        out[hf_name] = first[0][mc_name].clone() if dim is None else torch.cat([s[mc_name] for s in first], dim=dim)
    layers = [(f"model.layers.{i}.", f"decoder.layers.{i}.", kind) for i, kind in enumerate(_kinds(c))]
    layers += [(f"mtp.layers.{k}.", f"mtp.layers.{k}.{mtp_layer}.", "full_attention") for k in range(mtp)]
    for hf, mc, kind in layers:
        out.update(_layer_to_hf(shards, c, hf, mc, kind, per_expert(hf)))
    if c.tie_word_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out
