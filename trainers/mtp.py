"""Qwen3.5's multi-token-prediction (MTP) tensors as released checkpoints lay them out, and tiny checkpoints
that carry them.

A released Qwen3.5 checkpoint holds `mtp_num_hidden_layers` (1) MTP layers beside the language model, at the
checkpoint's top level (`mtp.*`, not under `model.` or `model.language_model.`, in the text, MoE and VL
checkpoints alike). transformers builds no MTP module and drops them on load
(`_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]` on Qwen3_5PreTrainedModel and the MoE twin), so a model
saved by transformers has none: `save_checkpoint` writes them into the saved safetensors itself.

The names, for hidden size H (docs/checks/bridge-parity.md gives their sources):
- `mtp.fc.weight` (H, 2H): the projection of [normed embedding of token t+1; normed hidden state of token t];
- `mtp.pre_fc_norm_embedding.weight`, `mtp.pre_fc_norm_hidden.weight`, `mtp.norm.weight` (H): zero-centred
  RMSNorms, shared by the MTP layers;
- `mtp.layers.{k}.*`: a full-attention decoder layer under transformers' decoder-layer names (input_layernorm,
  self_attn.{q,k,v,o}_proj with the gated q_proj, q_norm, k_norm, post_attention_layernorm), its MLP dense
  (`mlp.{gate,up,down}_proj`) or MoE (`mlp.gate`, `mlp.shared_expert.*`, `mlp.shared_expert_gate`), whose routed
  experts Qwen3.5 stores one by one (`mlp.experts.{e}.{gate,up,down}_proj.weight`) where the main decoder's are
  stacked (`mlp.experts.gate_up_proj`); Qwen3.6 checkpoints stack the MTP experts too (`packed=True`).
In a VL checkpoint the language model sits under `model.language_model.` and the vision tower under
`model.visual.`, while `lm_head` and `mtp.*` stay at the top level (`as_text` / `as_released` move between
that layout and the text model's names, which the Megatron mappings take).
Values are seeded random numbers, never the module defaults (zeros or uninitialised memory), so a tensor
swapped for another, or left at its initial value, shows.
"""
from __future__ import annotations

import json
from pathlib import Path

PREFIX = "mtp."
# Shared by the MTP layers: name -> "hidden" (H,) or "fc" (H, 2H)
SHARED = {"mtp.fc.weight": "fc", "mtp.pre_fc_norm_embedding.weight": "hidden",
          "mtp.pre_fc_norm_hidden.weight": "hidden", "mtp.norm.weight": "hidden"}
SAFETENSORS_INDEX = "model.safetensors.index.json"
LANGUAGE_MODEL = "model.language_model."  # a VL checkpoint's language model: the text model's `model.`


def text_config(config):
    """The language model's config: a VL config's text_config, else the config itself."""
    return getattr(config, "text_config", None) or config


def mtp_layers(config) -> int:
    """How many MTP layers a config declares (`mtp_num_hidden_layers`; 0 where it says nothing)."""
    return int(getattr(text_config(config), "mtp_num_hidden_layers", 0) or 0)


def layer_shapes(config, packed: bool = False) -> dict[str, tuple[int, ...]]:
    """One MTP layer's tensors, relative to `mtp.layers.{k}.`: name -> shape."""
    c = text_config(config)
    h, heads, groups, dim = c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim
    gated = 2 if getattr(c, "attn_output_gate", True) else 1  # q_proj holds each head's query and output gate
    shapes = {"input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
              "self_attn.q_proj.weight": (heads * dim * gated, h), "self_attn.k_proj.weight": (groups * dim, h),
              "self_attn.v_proj.weight": (groups * dim, h), "self_attn.o_proj.weight": (h, heads * dim),
              "self_attn.q_norm.weight": (dim,), "self_attn.k_norm.weight": (dim,)}
    experts = int(getattr(c, "num_experts", None) or 0)
    if not experts:
        size = c.intermediate_size
        return {**shapes, "mlp.gate_proj.weight": (size, h), "mlp.up_proj.weight": (size, h),
                "mlp.down_proj.weight": (h, size)}
    size, shared = c.moe_intermediate_size, c.shared_expert_intermediate_size
    shapes.update({"mlp.gate.weight": (experts, h), "mlp.shared_expert.gate_proj.weight": (shared, h),
                   "mlp.shared_expert.up_proj.weight": (shared, h), "mlp.shared_expert.down_proj.weight": (h, shared),
                   "mlp.shared_expert_gate.weight": (1, h)})
    if packed:
        return {**shapes, "mlp.experts.gate_up_proj": (experts, 2 * size, h),
                "mlp.experts.down_proj": (experts, h, size)}
    for e in range(experts):
        shapes.update({f"mlp.experts.{e}.gate_proj.weight": (size, h), f"mlp.experts.{e}.up_proj.weight": (size, h),
                       f"mlp.experts.{e}.down_proj.weight": (h, size)})
    return shapes


def mtp_shapes(config, layers: int | None = None, packed: bool = False) -> dict[str, tuple[int, ...]]:
    """Every MTP tensor of a checkpoint of `config` with `layers` MTP layers (default: the config's): name -> shape."""
    layers = mtp_layers(config) if layers is None else layers
    if not layers:
        return {}
    h = text_config(config).hidden_size
    shapes = {name: ((h, 2 * h) if kind == "fc" else (h,)) for name, kind in SHARED.items()}
    for k in range(layers):
        shapes.update({f"mtp.layers.{k}.{name}": shape for name, shape in layer_shapes(config, packed).items()})
    return shapes


def mtp_state(config, seed: int = 0, layers: int | None = None, packed: bool = False, dtype=None) -> dict:
    """The MTP tensors (seeded random values, in the config's order) of a checkpoint of `config`."""
    import torch

    generator = torch.Generator().manual_seed(seed + 4099)  # apart from the zoo's own seed stream
    return {name: (torch.randn(shape, generator=generator) * 0.1).to(dtype or torch.float32)
            for name, shape in mtp_shapes(config, layers, packed).items()}


def is_mtp(name: str) -> bool:
    return name.startswith(PREFIX)


def save_checkpoint(model, folder: str | Path, seed: int = 0, layers: int = 1, packed: bool = False) -> dict:
    """`model.save_pretrained(folder)` with `layers` MTP layers written into its safetensors (and
    `mtp_num_hidden_layers` into its config), as a released checkpoint carries them; the MTP tensors written.
    `layers=0` saves the model as transformers does, with `mtp_num_hidden_layers` 0."""
    folder = Path(folder)
    text_config(model.config).mtp_num_hidden_layers = layers
    model.save_pretrained(folder)
    tensors = mtp_state(model.config, seed, layers, packed, dtype=next(model.parameters()).dtype)
    if tensors:
        _add_tensors(folder, tensors)
    return tensors


def _add_tensors(folder: Path, tensors: dict) -> None:
    """Into a sharded checkpoint, one more shard named in its index; into a single file, that file rewritten."""
    from safetensors.torch import load_file, save_file

    index = folder / SAFETENSORS_INDEX
    if index.exists():
        table = json.loads(index.read_text(encoding="utf-8"))
        save_file(tensors, folder / "model-mtp.safetensors", metadata={"format": "pt"})
        table["weight_map"].update(dict.fromkeys(tensors, "model-mtp.safetensors"))
        index.write_text(json.dumps(table, indent=2, sort_keys=True), encoding="utf-8")
        return
    path = folder / "model.safetensors"
    save_file({**load_file(path), **tensors}, path, metadata={"format": "pt"})


def read_checkpoint(folder: str | Path) -> dict:
    """Every tensor of a folder's safetensors files, under its stored name."""
    from safetensors.torch import load_file

    state = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        state.update(load_file(file))
    return state


def is_vl(state) -> bool:
    """Whether a state dict is laid out as a VL checkpoint (its language model under `model.language_model.`)."""
    return any(name.startswith(LANGUAGE_MODEL) for name in state)


def as_text(state: dict) -> tuple[dict, dict]:
    """(the tensors a text mapping converts, under the text model's names; the rest: a VL checkpoint's vision
    tower). A text checkpoint comes back whole."""
    if not is_vl(state):
        return dict(state), {}
    text, rest = {}, {}
    for name, tensor in state.items():
        # transformers 5.5 writes the vision tower under the language model's prefix (`model.language_model.visual.`)
        if name.startswith(LANGUAGE_MODEL + "visual."):
            rest[name] = tensor
        elif name.startswith(LANGUAGE_MODEL):
            text["model." + name[len(LANGUAGE_MODEL):]] = tensor
        elif name.startswith(PREFIX) or not name.startswith("model."):  # mtp.*, lm_head: top level in both
            text[name] = tensor
        else:
            rest[name] = tensor
    return text, rest


def as_released(text_state: dict, vl: bool) -> dict:
    """Text-model names back to a checkpoint's: a VL checkpoint's language model under `model.language_model.`."""
    if not vl:
        return dict(text_state)
    return {(LANGUAGE_MODEL + name[len("model."):] if name.startswith("model.") else name): tensor
            for name, tensor in text_state.items()}
