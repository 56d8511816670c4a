"""The chunked log-prob / entropy forward: values, gradients, memory, and the patch on and off."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.patches import fused_logprob as fl


def _random_head(n=13, hidden=8, vocab=11, seed=0, bias=True):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, hidden, generator=gen, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=gen, requires_grad=True)
    b = torch.randn(vocab, generator=gen, requires_grad=True) if bias else None
    labels = torch.randint(0, vocab, (n,), generator=gen)
    return h, w, b, labels


def _grads(lp, ent, tensors, seed=1):
    gen = torch.Generator().manual_seed(seed)
    loss = (lp * torch.randn(lp.shape, generator=gen)).sum() + (ent * torch.randn(ent.shape, generator=gen)).sum()
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("chunk_size", [1, 5, 1000])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.3])
def test_chunked_matches_log_softmax_and_its_gradients(chunk_size, temperature):
    h, w, b, labels = _random_head()
    want_lp, want_ent = fl.reference_logprobs_and_entropy(torch.nn.functional.linear(h, w, b), labels, temperature)
    got_lp, got_ent = fl.chunked_logprobs_and_entropy(h, w, labels, temperature, chunk_size, bias=b)
    torch.testing.assert_close(got_lp, want_lp, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, atol=1e-6, rtol=1e-5)
    for got, want in zip(_grads(got_lp, got_ent, (h, w, b)), _grads(want_lp, want_ent, (h, w, b))):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_wrong_temperature_is_visible():
    h, w, _, labels = _random_head(bias=False)
    want_lp, _ = fl.reference_logprobs_and_entropy(h @ w.T, labels, 0.7)
    got_lp, _ = fl.chunked_logprobs_and_entropy(h, w, labels, 1.0)
    assert (got_lp - want_lp).abs().max() > 1e-2


def test_ignored_labels_give_zero_and_no_gradient():
    h, w, _, labels = _random_head(bias=False)
    labels[3] = fl.IGNORE_INDEX
    lp, _ = fl.chunked_logprobs_and_entropy(h, w, labels, 1.0, 4)
    assert lp[3] == 0
    (grad_h,) = torch.autograd.grad(lp.sum(), [h])
    assert torch.all(grad_h[3] == 0) and grad_h[2].abs().sum() > 0


def test_never_saves_a_tokens_by_vocabulary_tensor_for_backward():
    h, w, _, labels = _random_head(n=64, vocab=50, bias=False)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        fl.chunked_logprobs_and_entropy(h, w, labels, 1.0, chunk_size=8)
    assert saved and all(torch.Size(s).numel() < 64 * 50 for s in saved), saved
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        fl.reference_logprobs_and_entropy(h @ w.T, labels)
    assert any(torch.Size(s).numel() >= 64 * 50 for s in saved)  # the stock path does (the hook sees it)


def test_rejects_bad_arguments():
    h, w, _, labels = _random_head(bias=False)
    with pytest.raises(ValueError):
        fl.chunked_logprobs_and_entropy(h, w, labels, 0.0)
    with pytest.raises(ValueError):
        fl.chunked_logprobs_and_entropy(h, w, labels[:-1], 1.0)


@pytest.fixture(scope="module")
def text_model():
    models = pytest.importorskip("trainers.models")
    torch.set_num_threads(1)
    try:
        return models.build_model("text", seed=0)
    except models.Qwen35Unavailable as exc:
        pytest.skip(str(exc))


def test_model_level_function_matches_stock_logits(text_model):
    ids = torch.randint(3, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    logits = text_model(input_ids=ids, use_cache=False).logits[:, :-1]
    want_lp, want_ent = fl.reference_logprobs_and_entropy(logits, ids[:, 1:], 0.7)
    got_lp, got_ent = fl.logprobs_and_entropy(text_model, ids, temperature=0.7, chunk_size=9)
    assert got_lp.shape == (2, 19)
    torch.testing.assert_close(got_lp, want_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_ent, want_ent, atol=1e-5, rtol=1e-5)


def test_patch_applies_delegates_and_removes(text_model):
    patch = next(p for p in fl.PATCHES if p.name == "fused-logprob:Qwen3_5ForCausalLM")
    cls = type(text_model)
    original = cls.forward
    ids = torch.randint(3, 100, (1, 12), generator=torch.Generator().manual_seed(1))
    stock_logits = text_model(input_ids=ids, use_cache=False).logits
    with patch.applied_context():
        assert cls.forward is not original and patch.stock is original
        torch.testing.assert_close(text_model(input_ids=ids, use_cache=False).logits, stock_logits, atol=0, rtol=0)
        out = text_model(input_ids=ids, return_logprobs=True, temperature=0.7)
        assert out.logits is None and out.log_probs.shape == (1, 11)
        # The function routes through the patched forward (FSDP2 root hooks) and agrees with it.
        lp, _ = fl.logprobs_and_entropy(text_model, ids, temperature=0.7)
        torch.testing.assert_close(lp, out.log_probs, atol=0, rtol=0)
    assert cls.forward is original and patch.stock is None
