"""The GRPO update micro-batches through chunk_tensordict: the pieces rejoin to the batch, the
accumulated gradient is the whole mini-batch's, and the metrics line says how it was cut."""
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from harness.checks.nested_chunking.trainer_path import rollout_batch  # noqa: E402
from trainers.grpo import data, micro_batches  # noqa: E402
from trainers.grpo import objective as grpo  # noqa: E402
from trainers.grpo.loop import GRPOLoop  # noqa: E402


def test_micro_batches_rejoin_to_the_batch_and_are_cut_by_chunk_tensordict(monkeypatch):
    batch = rollout_batch()
    advantages = torch.arange(12.0)
    calls = []
    real = data.chunk_tensordict
    monkeypatch.setattr(data, "chunk_tensordict", lambda td, n: calls.append(n) or real(td, n))
    parts = micro_batches.split(batch, advantages, 2, 3)
    assert calls == [2, 3, 3]
    flat = [m for part in parts for m in part]
    assert [len(m.batch.prompt_lengths) for m in flat] == [2] * 6
    assert torch.equal(torch.cat([m.batch.input_ids for m in flat]), batch.input_ids)
    assert torch.equal(torch.cat([m.batch.attention_mask for m in flat]), batch.attention_mask)
    assert torch.equal(torch.cat([m.advantages for m in flat]), advantages)
    assert all(m.old_logprobs is None for m in flat)
    record = micro_batches.record(parts)
    assert "<lambda>" in record.pop("micro_batched_by")  # names the chunker that ran (here the test's wrapper)
    assert record == {"mini_batch_count": 2, "micro_batches": 3, "micro_batch_rows": [2, 2, 2]}


class _Loop(GRPOLoop):
    """GRPOLoop on a one-layer model: the loop's own update, no process group (one rank)."""

    dp_size = 1

    def __init__(self, micro: int, loss_agg: str):
        torch.manual_seed(0)
        self.policy, self.reference, self.grads = torch.nn.Embedding(100, 100), None, []
        self.config = SimpleNamespace(mini_batches=1, micro_batches=micro, ppo_epochs=1, loss_agg=loss_agg)
        self.loss_config = grpo.LossConfig(loss_agg=loss_agg)

    def _all_sum(self, values, group=None, op=None):
        return [float(v) for v in values]

    def response_logprobs(self, model, batch, with_entropy=False):
        logits = model(batch.input_ids)[:, batch.prompt_width - 1:-1]
        logprobs = torch.log_softmax(logits, -1).gather(-1, batch.response_ids[..., None]).squeeze(-1)
        return logprobs * batch.response_mask, grpo.entropy_from_logits(logits) if with_entropy else None

    def apply_gradients(self, loss):
        loss.backward()
        self.grads.append(self.policy.weight.grad.clone())
        self.policy.weight.grad = None
        return 0.0


@pytest.mark.parametrize("loss_agg", grpo.LOSS_AGGREGATIONS)
def test_accumulated_micro_batch_gradient_is_the_whole_batch_gradient(loss_agg):
    batch = rollout_batch()
    advantages = torch.linspace(-1.0, 1.0, 12)
    whole, micro = _Loop(1, loss_agg), _Loop(3, loss_agg)
    one = whole.update(batch, advantages)
    three = micro.update(batch, advantages)
    assert (one["micro_batches"], three["micro_batches"]) == (1, 3)
    assert three["micro_batched_by"] == "trainers.grpo.data.chunk_tensordict"
    assert torch.allclose(whole.grads[0], micro.grads[0], atol=1e-7) and whole.grads[0].abs().sum() > 0
    assert three["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert three["entropy"] == pytest.approx(one["entropy"], rel=1e-6)


def test_too_many_micro_batches_is_refused_in_one_line():
    with pytest.raises(ValueError, match="12 rows per mini-batch do not split into 13 micro-batches"):
        _Loop(13, "token-mean").update(rollout_batch(), torch.zeros(12))
