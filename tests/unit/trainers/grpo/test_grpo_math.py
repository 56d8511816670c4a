"""GRPO math against values computed by hand."""
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
