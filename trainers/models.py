"""The tiny Qwen3.5 model zoo: text, vision-language and MoE models built from configs.

Nothing is downloaded. Every config can be overridden from a JSON file, and a local
checkpoint directory loads real weights (used on accelerator runners).
"""
from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

MODEL_KINDS = ("text", "vl", "moe")

# Small enough for one CPU thread, big enough to keep both layer kinds: three Gated
# DeltaNet layers and one full-attention layer (the stock 3:1 pattern).
_TEXT = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

_MOE = {
    **{k: v for k, v in _TEXT.items() if k != "intermediate_size"},
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}

# Untied word embeddings matter: that is what makes verl (and our trainer) wrap
# `visual.pos_embed` as its own FSDP unit, the precondition of the offload bug.
_VL = {
    "text_config": {**_TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                  "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                                                  "partial_rotary_factor": 1.0}},
    "vision_config": {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 16,
    },
    "image_token_id": 120,
    "video_token_id": 121,
    "vision_start_token_id": 122,
    "vision_end_token_id": 123,
    "tie_word_embeddings": False,
}

# kind -> (transformers module, config class, model class, default config)
_ZOO = {
    "text": ("qwen3_5", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", _TEXT),
    "vl": ("qwen3_5", "Qwen3_5Config", "Qwen3_5ForConditionalGeneration", _VL),
    "moe": ("qwen3_5_moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", _MOE),
}


class Qwen35Unavailable(RuntimeError):
    """The installed transformers has no Qwen3.5 (it first appears in 5.2.0)."""


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def _classes(kind: str):
    if kind not in _ZOO:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {', '.join(MODEL_KINDS)}")
    module, config_name, model_name, _ = _ZOO[kind]
    try:
        mod_cfg = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
        mod_model = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        return getattr(mod_cfg, config_name), getattr(mod_model, model_name)
    except (ImportError, AttributeError) as exc:
        raise Qwen35Unavailable(
            f"Qwen3.5 ({kind}) is unavailable in transformers {transformers_version()}: {exc}"
        ) from exc


def default_config(kind: str) -> dict[str, Any]:
    """The zoo's config for `kind` as a plain dict (a copy)."""
    _classes(kind)
    return copy.deepcopy(_ZOO[kind][3])


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def build_config(kind: str = "text", override: dict | str | Path | None = None):
    """A transformers config for `kind`; `override` is a dict or a JSON file merged on top."""
    config_cls, _ = _classes(kind)
    values = default_config(kind)
    if override is not None:
        if not isinstance(override, dict):
            path = Path(override)
            try:
                override = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"--model-config {path}: {exc}") from exc
            if not isinstance(override, dict):
                raise ValueError(f"--model-config {path}: expected a JSON object")
        values = _merge(values, override)
    return config_cls(**values)


def build_model(kind: str = "text", override=None, seed: int = 0, model_path: str | Path | None = None,
                dtype=None):
    """A tiny Qwen3.5 model with deterministic weights, or real weights from `model_path`."""
    import torch

    config_cls, model_cls = _classes(kind)
    if model_path is not None:
        return model_cls.from_pretrained(str(model_path), dtype=dtype or torch.float32)
    config = build_config(kind, override)
    torch.manual_seed(seed)
    model = model_cls(config)
    if dtype is not None:
        model = model.to(dtype)
    return model
