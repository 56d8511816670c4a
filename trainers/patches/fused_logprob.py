"""Fused log-prob and entropy forward with temperature, chunked over tokens.

RL trainers need, for every response token, log p(token) and the entropy of the policy at a
sampling temperature T. The stock way (logits = model(...).logits; log_softmax(logits / T))
materialises a float32 (tokens x vocabulary) tensor and keeps it for backward: with a 150k
vocabulary that is the largest tensor of the step. Here the model body gives hidden states,
and `ChunkedLogProbEntropy` walks the tokens in chunks: each chunk's logits exist only while
that chunk is processed, in forward and again (recomputed) in backward.

`logprobs_and_entropy(model, input_ids, ...)` is the function trainers call. The patch makes
the causal-LM forward of Qwen3.5 (dense, MoE, and the vision-language twins) accept
`return_logprobs=True`, so that under FSDP2 the call goes through the root module's forward
(whose hooks unshard `lm_head`) instead of reaching into `model.lm_head` from outside.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from packaging.specifiers import SpecifierSet

from .base import DelegatingPatch, Patch, resolve

DEFAULT_CHUNK_SIZE = 512  # tokens per chunk: chunk x vocab floats live at once
IGNORE_INDEX = -100
_FUSED_KWARGS = ("return_logprobs", "temperature", "logprob_labels", "logprob_chunk_size")


class ChunkedLogProbEntropy(torch.autograd.Function):
    """(hidden (N, H), weight (V, H), bias, labels (N,)) -> float32 log-probs (N,) and entropies (N,).

    Forward and backward both loop over chunks of tokens and recompute that chunk's logits, so
    only hidden, weight and labels are saved. Gradients (with z = logits / T, p = softmax(z)):
      d logp[label] / dz = onehot(label) - p;   d entropy / dz = p * (E_p[z] - z) = p * (E_p[log p] - log p).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, temperature: float, chunk_size: int):
        n_tokens = hidden.shape[0]
        logprobs = torch.zeros(n_tokens, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n_tokens, dtype=torch.float32, device=hidden.device)
        valid = labels >= 0
        safe_labels = labels.clamp(min=0)
        for start in range(0, n_tokens, chunk_size):
            end = min(start + chunk_size, n_tokens)
            # Same op order as the stock path (logits in the model's dtype, then float) so bf16 agrees.
            z = F.linear(hidden[start:end], weight, bias).float() / temperature
            lse = torch.logsumexp(z, dim=-1)
            logp = z - lse[:, None]
            picked = logp.gather(-1, safe_labels[start:end, None]).squeeze(-1)
            logprobs[start:end] = torch.where(valid[start:end], picked, torch.zeros_like(picked))
            # -sum p log p, not lse - sum p z: no cancellation when the distribution is peaked.
            entropy[start:end] = -(logp.exp() * logp).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, labels)
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        hidden, weight, bias, labels = ctx.saved_tensors
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        need_h, need_w, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        grad_hidden = torch.zeros_like(hidden) if need_h else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        valid = labels >= 0
        safe_labels = labels.clamp(min=0)
        for start in range(0, hidden.shape[0], chunk_size):
            end = min(start + chunk_size, hidden.shape[0])
            h = hidden[start:end]
            z = F.linear(h, weight, bias).float() / temperature
            logp = torch.log_softmax(z, dim=-1)
            p = logp.exp()
            g_lp = torch.where(valid[start:end], grad_logprobs[start:end], torch.zeros_like(grad_logprobs[start:end]))
            g_ent = grad_entropy[start:end]
            mean_logp = (p * logp).sum(-1, keepdim=True)  # E_p[z] - z == E_p[log p] - log p
            grad_z = g_ent[:, None] * p * (mean_logp - logp) - g_lp[:, None] * p
            grad_z.scatter_add_(-1, safe_labels[start:end, None], g_lp[:, None])
            # As autograd would: the float32 gradient goes back through `.float()` into the model dtype.
            grad_logits = (grad_z / temperature).to(weight.dtype)
            if need_h:
                grad_hidden[start:end] = grad_logits @ weight
            if need_w:
                grad_weight += (grad_logits.t() @ h).float()
            if need_b:
                grad_bias += grad_logits.float().sum(0)
        return (grad_hidden,
                grad_weight.to(weight.dtype) if need_w else None,
                grad_bias.to(bias.dtype) if need_b else None,
                None, None, None)


def chunked_logprobs_and_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                 temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE,
                                 bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `labels` and entropies under softmax(hidden @ weight.T / T), shaped like `labels`.

    Labels equal to IGNORE_INDEX (any negative value) get log-prob 0 and no gradient.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and labels {tuple(labels.shape)} do not line up")
    flat_h = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    logprobs, entropy = ChunkedLogProbEntropy.apply(flat_h, weight, bias, flat_labels, float(temperature),
                                                    int(chunk_size))
    return logprobs.view(labels.shape), entropy.view(labels.shape)


def reference_logprobs_and_entropy(logits: torch.Tensor, labels: torch.Tensor,
                                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The stock computation: log_softmax of the full logits / T, and the entropy of softmax."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    valid = labels >= 0
    picked = logp.gather(-1, labels.clamp(min=0).long().unsqueeze(-1)).squeeze(-1)
    logprobs = torch.where(valid, picked, torch.zeros_like(picked))
    entropy = -(logp.exp() * logp).sum(-1)
    return logprobs, entropy


def _next_token_labels(input_ids: torch.Tensor, hidden: torch.Tensor, labels: torch.Tensor | None):
    """Default targets: the next input token, so results have L-1 columns (position t scores token t+1)."""
    if labels is not None:
        return hidden, labels
    return hidden[:, :-1], input_ids[:, 1:]


def _fused_from_body(model, input_ids, temperature, chunk_size, labels, model_kwargs):
    model_kwargs.setdefault("use_cache", False)  # training path; a cache also disables packed masks
    for unused in ("labels", "logits_to_keep"):
        model_kwargs.pop(unused, None)
    hidden = model.model(input_ids=input_ids, **model_kwargs).last_hidden_state
    hidden, labels = _next_token_labels(input_ids, hidden, labels)
    head = model.lm_head
    return chunked_logprobs_and_entropy(hidden, head.weight, labels, temperature, chunk_size, bias=head.bias)


@dataclass
class FusedLogProbOutput:
    """What the patched forward returns for `return_logprobs=True` (no logits)."""

    log_probs: torch.Tensor
    entropy: torch.Tensor
    logits: None = None


def logprobs_and_entropy(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         temperature: float = 1.0, chunk_size: int = DEFAULT_CHUNK_SIZE,
                         labels: torch.Tensor | None = None, **model_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token float32 log-probs and entropies at `temperature`, never holding full-vocab logits.

    Without `labels`, column t is the log-prob of input_ids[:, t+1] (shape (B, L-1)). With
    `labels` (B, L), column t scores labels[:, t]. Extra kwargs (position_ids, pixel_values,
    cu_seq_lens_q, ...) go to the model body. For Qwen3.5 models the call goes through
    `model(...)` with the patch applied (for the call, if it was not already), so FSDP2's root
    hooks run.
    """
    patch = _patch_for(type(model))
    if patch is None:  # not a Qwen3.5 causal LM (or not this version): the body and head directly
        return _fused_from_body(model, input_ids, temperature, chunk_size, labels,
                                {"attention_mask": attention_mask, **model_kwargs})
    # Through model(...) so that FSDP2's root pre-forward hook unshards the head and final norm.
    with contextlib.nullcontext() if patch.applied else patch.applied_context():
        out = model(input_ids=input_ids, attention_mask=attention_mask, return_logprobs=True, temperature=temperature,
                    logprob_labels=labels, logprob_chunk_size=chunk_size, **model_kwargs)
    return out.log_probs, out.entropy


def _patch_for(model_class: type) -> DelegatingPatch | None:
    """The applicable fused-forward patch whose target class `model_class` is (or derives from)."""
    for patch in PATCHES:
        if patch.applied or patch.applicable()[0]:
            owner, _ = resolve(patch.target)
            if isinstance(owner, type) and issubclass(model_class, owner):
                return patch
    return None


def _make_fused_forward(stock: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self, *args, return_logprobs: bool = False, temperature: float = 1.0, logprob_labels=None,
                logprob_chunk_size: int = DEFAULT_CHUNK_SIZE, **kwargs):
        if not return_logprobs:
            return stock(self, *args, **kwargs)
        if args:  # keyword-only on the fused path: positional order differs between releases
            raise TypeError("return_logprobs=True takes keyword arguments only")
        input_ids = kwargs.pop("input_ids", None)
        if input_ids is None:
            raise ValueError("return_logprobs=True needs input_ids (they define the default targets)")
        logprobs, entropy = _fused_from_body(self, input_ids, temperature, logprob_chunk_size, logprob_labels,
                                             kwargs)
        return FusedLogProbOutput(log_probs=logprobs, entropy=entropy)

    forward._fused_logprob = True
    forward.__wrapped__ = stock
    forward.__doc__ = "Stock forward; with return_logprobs=True, chunked log-probs and entropy at `temperature`."
    return forward


_MODULES = {
    "qwen3_5": ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    "qwen3_5_moe": ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
}

PATCHES: list[Patch] = [
    DelegatingPatch(
        name=f"fused-logprob:{cls}",
        target=f"transformers.models.{module}.modeling_{module}:{cls}.forward",
        replacement=None,
        make=_make_fused_forward,
        versions=SpecifierSet(">=5.2"),
        description="forward(return_logprobs=True, temperature=T) gives chunked log-probs and entropy",
    )
    for module, classes in _MODULES.items()
    for cls in classes
]
