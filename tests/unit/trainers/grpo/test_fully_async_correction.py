"""The fully-async off-policy correction (truncated importance sampling) against the math.

A broken correction (the ratio left out, or taken the wrong way round) fails these tests."""
import math

import pytest
import torch

from trainers.grpo import objective as grpo


def test_truncated_weights_by_hand():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    behaviour = torch.tensor([[-1.5, -1.0, -0.5]])
    weights = grpo.truncated_importance_weights(old, behaviour, cap=1.5)
    # exp(0.5) = 1.65 is truncated to 1.5; exp(-1) stays; equal log-probs give 1
    assert torch.allclose(weights, torch.tensor([[1.5, math.exp(-1.0), 1.0]]))
    with pytest.raises(ValueError):
        grpo.truncated_importance_weights(old, behaviour, cap=0.0)


def test_policy_loss_multiplies_each_token_by_its_weight():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.7, -0.3]], requires_grad=True)
    behaviour = torch.tensor([[-1.2, -1.5], [-0.7, -1.0]])
    advantages = torch.tensor([1.0, -0.5])
    mask = torch.ones(2, 2)
    config = grpo.LossConfig(tis_cap=2.0)
    loss, stats = grpo.policy_loss(logprobs, logprobs.detach(), advantages, mask, config,
                                   behaviour_logprobs=behaviour)
    # on-policy with respect to old: ratio 1, per token -A * w, w = min(exp(logp - behaviour), 2)
    w = torch.exp(logprobs.detach() - behaviour).clamp(max=2.0)
    expected = (-advantages[:, None] * w).mean()
    assert torch.allclose(loss, expected)
    assert stats["is_weight_mean"] == pytest.approx(float(w.mean()))
    assert stats["is_truncated_fraction"] == pytest.approx(0.25)  # exp(0.7) = 2.01 is capped
    # without a cap (sync mode) the behaviour log-probs change nothing
    plain, _ = grpo.policy_loss(logprobs, logprobs.detach(), advantages, mask, grpo.LossConfig(),
                                behaviour_logprobs=behaviour)
    assert torch.allclose(plain, (-advantages[:, None] * torch.ones(2, 2)).mean())


def _exact_gradient(theta: torch.Tensor, sample_probs: torch.Tensor, reward: torch.Tensor, cap: float | None):
    """The expected policy-gradient loss gradient over every token x of a one-token vocabulary,
    each weighted by the probability the *behaviour* policy samples it (no sampling noise)."""
    theta = theta.clone().requires_grad_(True)
    logprobs = torch.log_softmax(theta, dim=-1)[:, None]  # (V, 1): each token is a one-token sequence
    behaviour = torch.log(sample_probs)[:, None] if cap is not None else None
    config = grpo.LossConfig(tis_cap=cap)
    total = 0.0
    for row in range(theta.numel()):
        part = slice(row, row + 1)
        loss, _ = grpo.policy_loss(logprobs[part], logprobs[part].detach(), reward[part], torch.ones(1, 1),
                                   config, behaviour_logprobs=None if behaviour is None else behaviour[part])
        total = total + sample_probs[row] * loss  # how often the behaviour policy samples this token
    (grad,) = torch.autograd.grad(total, theta)
    return grad


def test_corrected_stale_gradient_equals_the_on_policy_gradient():
    """E_behaviour[w * A * grad log pi] = E_pi[A * grad log pi] when w = pi / behaviour (cap not hit);
    leaving the ratio out gives the behaviour policy's gradient instead, which differs."""
    torch.manual_seed(0)
    theta = torch.randn(5, dtype=torch.float64)
    stale = torch.softmax(theta + 0.4 * torch.randn(5, dtype=torch.float64), dim=-1)  # older weights
    current = torch.softmax(theta, dim=-1)
    reward = torch.tensor([1.0, 0.0, 0.5, -1.0, 0.2], dtype=torch.float64)
    on_policy = _exact_gradient(theta, current, reward, cap=None)
    corrected = _exact_gradient(theta, stale, reward, cap=100.0)
    uncorrected = _exact_gradient(theta, stale, reward, cap=None)
    assert torch.allclose(corrected, on_policy, atol=1e-12)
    assert not torch.allclose(uncorrected, on_policy, atol=1e-3)
