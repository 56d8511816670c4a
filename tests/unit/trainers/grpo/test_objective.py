"""trainers.grpo.objective: the GRPO math against values computed by hand, and the fully-async off-policy
correction (truncated importance sampling) against the math: a broken correction (the ratio left out, or taken
the wrong way round) fails these tests."""
import math

import pytest
import torch

from trainers.grpo import objective as grpo


def test_group_advantages_by_hand():
    # group [1, 0, 0, 1]: mean 0.5, Bessel std sqrt(1/3); group [0, 0, 0, 1]: mean 0.25, std 0.5
    adv = grpo.group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]), group_size=4, eps=0.0)
    s = math.sqrt(1 / 3)
    expected = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, -0.5, -0.5, -0.5, 1.5]
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-6)


def test_equal_rewards_give_zero_advantage_and_bad_shapes_raise():
    assert torch.equal(grpo.group_advantages(torch.full((4,), 0.7), 2), torch.zeros(4))
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError):
        grpo.group_advantages(torch.zeros(4), 1)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    k1 = grpo.token_kl(logp, ref, "k1")
    assert torch.allclose(k1, torch.tensor([0.5, -1.0]))
    k3 = grpo.token_kl(logp, ref, "k3")  # exp(d) - d - 1 with d = ref - logp = [-0.5, 1.0]
    assert torch.allclose(k3, torch.tensor([math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 2]))
    assert bool((k3 >= 0).all())
    with pytest.raises(ValueError):
        grpo.token_kl(logp, ref, "k2")


def test_entropy_by_hand():
    uniform = grpo.entropy_from_logits(torch.zeros(1, 4))
    assert torch.allclose(uniform, torch.tensor([math.log(4)]))
    p = torch.tensor([0.7, 0.2, 0.1])
    assert torch.allclose(grpo.entropy_from_logits(p.log()[None]), -(p * p.log()).sum()[None], atol=1e-6)


def test_aggregations_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(grpo.aggregate(values, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(grpo.aggregate(values, mask, "seq-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    # a sharding trainer passes the global count per rank
    assert float(grpo.aggregate(values, mask, "token-mean", denominator=8.0)) == pytest.approx(10 / 8)
    with pytest.raises(ValueError):
        grpo.aggregate(values, mask, "sum")


def test_clipped_loss_both_sides_by_hand():
    # ratios e^0.5=1.649 (clipped at 1.2 for A>0), e^-0.5=0.607 (clipped at 0.8 for A<0),
    # e^0.1=1.105 inside the range.
    old = torch.zeros(3, 1)
    logp = torch.tensor([[0.5], [-0.5], [0.1]])
    adv = torch.tensor([1.0, -1.0, 2.0])
    mask = torch.ones(3, 1)
    loss, m = grpo.policy_loss(logp, old, adv, mask, grpo.LossConfig(0.2, 0.2))
    per_token = [-1.2, 0.8, -2 * math.exp(0.1)]
    assert float(loss) == pytest.approx(sum(per_token) / 3, rel=1e-6)
    assert m["clip_fraction"] == pytest.approx(2 / 3)
    assert m["clip_fraction_high"] == pytest.approx(1 / 3) and m["clip_fraction_low"] == pytest.approx(1 / 3)


def test_clip_does_not_bound_the_pessimistic_side_and_clip_higher():
    # A>0 with ratio < 1 - eps: the unclipped term is larger (worse), so it is kept, no clip.
    loss, m = grpo.policy_loss(torch.tensor([[-0.5]]), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1))
    assert float(loss) == pytest.approx(-math.exp(-0.5))
    assert m["clip_fraction"] == 0.0
    # asymmetric bounds: eps_high 0.28 clips e^0.5 at 1.28
    loss, _ = grpo.policy_loss(torch.tensor([[0.5]]), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1),
                               grpo.LossConfig(0.2, 0.28))
    assert float(loss) == pytest.approx(-1.28)


def test_loss_gradient_and_kl_term():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1], [1, 0]])
    config = grpo.LossConfig(loss_agg="seq-mean-token-mean", kl_coef=0.5, kl_estimator="k1")
    loss, m = grpo.policy_loss(logp, logp.detach(), adv, mask, config, ref_logprobs=ref)
    # ratio 1: pg = -A per token; seq means: [-1, 1] -> 0. k1 = logp - ref: seq means [-0.5, 0.5] -> 0
    assert float(loss.detach()) == pytest.approx(0.0) and m["kl"] == pytest.approx(0.0)
    loss.backward()
    # d/dlogp of (-A*ratio)/len_seq/2 seqs + 0.5 * (1/len_seq/2); masked token gets nothing
    expected = torch.tensor([[-1 / 4 + 0.5 / 4, -1 / 4 + 0.5 / 4], [1 / 2 + 0.5 / 2, 0.0]])
    assert torch.allclose(logp.grad, expected)


# --- the off-policy correction (truncated importance sampling) ---------------------------------------

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
