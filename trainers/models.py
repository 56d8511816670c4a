"""The tiny Qwen3.5 model zoo: text, vision-language and MoE models built from configs.

Nothing is downloaded. Every config can be overridden from a JSON file, and a local
checkpoint directory loads real weights (used on accelerator runners). An override's keys must be ones the
installed transformers' config class has or ones a released Qwen3.5 config carries (plans/models/released-keys.toml,
with its sources): any other key is refused, naming it, so a typo never tests the default model in silence.
"""
from __future__ import annotations

import copy
import difflib
import functools
import importlib
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from trainers.errors import TrainerInputError, TrainerUnavailable

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

# The zoo at one Gated DeltaNet layer and one full-attention layer, for the checks that compare one model two ways
# (with and without a patch, packed and unpacked, offloaded and not): one layer of each kind runs every code path
# such a comparison judges; the zoo's two more DeltaNet layers only repeat them (harness/checks/patch_parity/inputs.py
# measures what they cost).
ONE_OF_EACH = {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}


def one_of_each(kind: str) -> dict[str, Any]:
    """The override that builds `kind` at ONE_OF_EACH (a copy; the VL model's is its text model's)."""
    return copy.deepcopy({"text_config": ONE_OF_EACH} if kind == "vl" else ONE_OF_EACH)


# kind -> (transformers module, config class, model class, default config)
_ZOO = {
    "text": ("qwen3_5", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", _TEXT),
    "vl": ("qwen3_5", "Qwen3_5Config", "Qwen3_5ForConditionalGeneration", _VL),
    "moe": ("qwen3_5_moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", _MOE),
}


# The keys of the released configs, per model type (data, with sources), and the model type of each zoo kind.
RELEASED_KEYS = Path(__file__).resolve().parents[1] / "plans" / "models" / "released-keys.toml"
MODEL_TYPES = {"text": "qwen3_5_text", "vl": "qwen3_5", "moe": "qwen3_5_moe_text"}


class Qwen35Unavailable(TrainerUnavailable):
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


def read_override(path: str | Path) -> dict:
    """A `--model-config` file: a JSON object whose numbers are finite and whose sizes (the keys the zoo
    sets to a positive whole number, ids aside) are whole numbers >= 1. TrainerInputError in one line."""
    path = Path(path)
    try:
        override = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TrainerInputError(f"--model-config {path}: not a JSON file ({reason})") from None
    if not isinstance(override, dict):
        raise TrainerInputError(f"--model-config {path}: expected a JSON object of config keys, "
                                f"got a {type(override).__name__}")
    problem = _bad_number(override, _positive_sizes())
    if problem:
        raise TrainerInputError(f"--model-config {path}: {problem}")
    return override


def _positive_sizes() -> set[str]:
    """Every key some zoo config sets to a whole number >= 1 (token ids aside): a size that 0 or less breaks."""
    found: set[str] = set()

    def walk(table: dict) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                walk(value)
            elif type(value) is int and value >= 1 and not key.endswith("_id"):
                found.add(key)

    for *_, config in _ZOO.values():
        walk(config)
    return found


def _bad_number(table: dict, sizes: set[str], prefix: str = "") -> str | None:
    for key, value in table.items():
        where = prefix + str(key)
        if isinstance(value, dict):
            inner = _bad_number(value, sizes, where + ".")
            if inner:
                return inner
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{where}: expected a finite number, got {value}"
        elif key in sizes and (type(value) is not int or value < 1):
            return f"{where}: expected a whole number >= 1, got {value!r}"
    return None


@functools.cache
def _released_tables() -> dict[str, Any]:
    return tomllib.loads(RELEASED_KEYS.read_text(encoding="utf-8"))


def released_keys(model_type: str) -> dict[str, Any]:
    """The keys a released config of `model_type` carries, as a tree: key -> None, or its table's keys."""
    table = _released_tables()[model_type]
    tree: dict[str, Any] = dict.fromkeys(table["keys"])
    for name, value in table.items():
        if name not in ("keys", "sources"):
            tree[name] = released_keys(value) if isinstance(value, str) else dict.fromkeys(value)
    return tree


def unknown_key(override: dict, known: dict, released: dict, prefix: str = "") -> str | None:
    """The first key of `override` (nested tables included) that neither the config class has (`known`: its
    to_dict()) nor a released Qwen3.5 config carries (`released`: released_keys), as a dotted path."""
    for key, value in override.items():
        if key not in known and key not in released:
            return prefix + str(key)
        if isinstance(value, dict):
            inner = unknown_key(value, known.get(key) if isinstance(known.get(key), dict) else {},
                                released.get(key) or {}, f"{prefix}{key}.")
            if inner:
                return inner
    return None


def _near(path: str, known: dict, released: dict) -> str:
    """' (did you mean X?)' for a key close to one of the same table's keys, else ''."""
    *tables, key = path.split(".")
    for table in tables:
        known = known.get(table) if isinstance(known.get(table), dict) else {}
        released = released.get(table) or {}
    close = difflib.get_close_matches(key, [*known, *released], n=1, cutoff=0.8)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_override(kind: str, override: dict, where: str) -> None:
    """An override fits the `kind` config: every key one its config class has or a released config of its model
    type carries, and the config class takes the values. A vision-language config given for the text model is
    named here, not deep inside transformers."""
    known, released = build_config(kind).to_dict(), released_keys(MODEL_TYPES[kind])
    unknown = unknown_key(override, known, released)
    if unknown:
        raise TrainerInputError(f"{where}: unknown key {unknown!r} for a {kind} Qwen3.5 config: neither transformers' "
                                f"{_ZOO[kind][1]} nor a released {MODEL_TYPES[kind]} config has it"
                                + _near(unknown, known, released))
    try:
        build_config(kind, override)
    except Exception as exc:  # noqa: BLE001 - whatever the config class refuses, said in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise TrainerInputError(f"{where}: not a usable {kind} config ({type(exc).__name__}: {first})") from None


def build_config(kind: str = "text", override: dict | str | Path | None = None):
    """A transformers config for `kind`; `override` is a dict or a JSON file (read_override) merged on top."""
    config_cls, _ = _classes(kind)
    values = default_config(kind)
    if override is not None:
        values = _merge(values, override if isinstance(override, dict) else read_override(override))
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
