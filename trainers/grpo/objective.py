"""GRPO math, pure and small: advantages, the clipped policy loss, KL, entropy, aggregation.

Shared by the FSDP and Megatron trainers. Shapes: per-token tensors are `(batch, response_len)`
with a `mask` of the same shape (1 for response tokens that count). Nothing here knows about
devices, ranks or models; the trainer passes global denominators when it shards a batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean")
KL_ESTIMATORS = ("k1", "k3")


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """(r - group mean) / (group std + eps), per group of `group_size` consecutive samples.

    The std is Bessel-corrected (as verl and TRL compute it); a group whose rewards are all
    equal gets zero advantages, so it adds nothing to the gradient.
    """
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}")
    if group_size < 2:
        raise ValueError("GRPO needs at least 2 samples per prompt to normalise within a group")
    grouped = rewards.float().view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return ((grouped - mean) / (std + eps)).view(-1)


def token_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probs.

    k1 = log p - log q (unbiased, can be negative); k3 = q/p - log(q/p) - 1 (unbiased and >= 0,
    Schulman's low-variance estimator), with p the policy and q the reference.
    """
    log_ratio = ref_logprobs - logprobs
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension (pass logits already divided by T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, denominator: float | None = None) -> torch.Tensor:
    """Reduce per-token `values` to a scalar.

    token-mean: every response token weighs the same (sum / number of tokens).
    seq-mean-token-mean: each sequence's token mean, then the mean over sequences.
    `denominator` replaces the local token (or sequence) count: a trainer that shards a batch
    over ranks passes global_count / world_size, so the rank-averaged gradient equals the
    gradient of the whole batch.
    """
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        total = (values * mask).sum()
        count = mask.sum()
    elif mode == "seq-mean-token-mean":
        per_sequence = (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        total = per_sequence.sum()
        count = torch.tensor(float(values.shape[0]))
    else:
        raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {LOSS_AGGREGATIONS}")
    return total / (denominator if denominator is not None else count.clamp(min=1.0))


@dataclass(frozen=True)
class LossConfig:
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2  # > clip_eps_low is DAPO's "clip higher"
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    # Truncated importance sampling (TIS) against the engine's behaviour log-probs; None: off.
    # Fully-async runs set it: their samples come from weights up to `staleness` versions old.
    tis_cap: float | None = None


def truncated_importance_weights(old_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor,
                                 cap: float) -> torch.Tensor:
    """min(pi_old / pi_behaviour, cap) per token, detached (TIS, as verl applies it).

    pi_behaviour is the policy that sampled the tokens (a stale weight version in a fully-async run,
    as its engine reported it); pi_old is the trainer's policy at the start of this update. The
    clipped surrogate then corrects from old to the current policy, this weight from behaviour to
    old, so the gradient is that of the current policy's objective. The cap bounds the variance.
    """
    if cap <= 0:
        raise ValueError(f"tis_cap must be > 0, got {cap}")
    return torch.exp(old_logprobs.detach() - behaviour_logprobs.detach()).clamp(max=cap)


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, config: LossConfig = LossConfig(), ref_logprobs: torch.Tensor | None = None,
                denominator: float | None = None,
                behaviour_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate with per-sequence advantages, plus an optional KL penalty.

    Per token: max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high)), ratio = exp(logp - old).
    With `config.tis_cap` and `behaviour_logprobs` (the engine's log-probs of the sampled tokens),
    each token's term is multiplied by truncated_importance_weights(old, behaviour, tis_cap).
    Returns the aggregated loss and detached metrics (local to this call: the trainer reduces them).
    """
    advantages = advantages.reshape(-1, 1).to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - config.clip_eps_low, 1.0 + config.clip_eps_high)
    per_token = torch.maximum(unclipped, clipped)
    is_weights = None
    if config.tis_cap is not None and behaviour_logprobs is not None:
        is_weights = truncated_importance_weights(old_logprobs, behaviour_logprobs, config.tis_cap)
        per_token = per_token * is_weights
    pg_loss = aggregate(per_token, mask, config.loss_agg, denominator)
    loss = pg_loss
    kl_value = 0.0
    if ref_logprobs is not None:
        kl = token_kl(logprobs, ref_logprobs, config.kl_estimator)
        kl_loss = aggregate(kl, mask, config.loss_agg, denominator)
        loss = loss + config.kl_coef * kl_loss
        kl_value = float(kl_loss.detach())
    with torch.no_grad():
        fmask = mask.to(per_token.dtype)
        tokens = float(fmask.sum().clamp(min=1.0))
        was_clipped = (clipped > unclipped).to(per_token.dtype)  # the clip bound set the loss
        low = ((ratio < 1.0 - config.clip_eps_low) & (advantages < 0)).to(per_token.dtype)
        high = ((ratio > 1.0 + config.clip_eps_high) & (advantages > 0)).to(per_token.dtype)
        metrics = {
            "pg_loss": float(pg_loss),
            "kl": kl_value,
            "clip_fraction": float((was_clipped * fmask).sum()) / tokens,
            "clip_fraction_low": float((low * fmask).sum()) / tokens,
            "clip_fraction_high": float((high * fmask).sum()) / tokens,
            "ratio_mean": float((ratio * fmask).sum()) / tokens,
            "tokens": float(fmask.sum()),
        }
        if is_weights is not None:  # the weights, and the ratio pi_old / pi_behaviour before truncation
            is_ratio = torch.exp(old_logprobs.detach() - behaviour_logprobs.detach())
            metrics["is_weight_mean"] = float((is_weights * fmask).sum()) / tokens
            metrics["is_truncated_fraction"] = float(((is_weights >= config.tis_cap) * fmask).sum()) / tokens
            metrics["is_ratio_mean"] = float((is_ratio * fmask).sum()) / tokens
            metrics["is_ratio_max"] = float(is_ratio.masked_fill(fmask == 0, 0.0).max()) if fmask.any() else 0.0
    return loss, metrics
