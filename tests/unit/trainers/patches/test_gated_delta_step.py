"""The one-token Gated DeltaNet decode step patch: equal to the stock rule for a float32 token with a
state, everything else left to the stock rule, a model built under it decodes like stock in every
release (5.2-5.9 bind the rule at build), and a broken step fails that parity.

Marked `versions`: `nox -s tests-affected` runs these on 5.3.0, where the rule is bound at build."""
from __future__ import annotations

import inspect

import pytest
from packaging.specifiers import SpecifierSet

torch = pytest.importorskip("torch")

from qwen35_helpers import qwen35_or_skip  # noqa: E402

from harness.checks.patch_parity import TOLERANCES  # noqa: E402
from harness.checks.patch_parity import stock as parity_stock  # noqa: E402
from harness.results.records import Status  # noqa: E402
from trainers.patches import gated_delta_step  # noqa: E402
from trainers.patches.base import resolve  # noqa: E402

pytestmark = pytest.mark.versions
FP32 = {"float32": TOLERANCES["float32"]}


def _stock_rule():
    qwen35_or_skip()
    patch = gated_delta_step.PATCHES[0]
    owner, attr = resolve(patch.target)
    return getattr(owner, attr)


def _token(length=1, key_heads=2, heads=4, dim=8, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"query": torch.randn(3, length, key_heads, dim, generator=gen).to(dtype),
            "key": torch.randn(3, length, key_heads, dim, generator=gen).to(dtype),
            "value": torch.randn(3, length, heads, dim, generator=gen).to(dtype),
            "g": -torch.rand(3, length, heads, generator=gen).to(dtype),
            "beta": torch.rand(3, length, heads, generator=gen).to(dtype),
            "initial_state": torch.randn(3, heads, dim, dim, generator=gen)}


def _call(rule, inputs):
    return rule(inputs["query"], inputs["key"], inputs["value"], g=inputs["g"], beta=inputs["beta"],
                initial_state=inputs["initial_state"], output_final_state=True, use_qk_l2norm_in_kernel=True)


def test_one_token_with_a_state_equals_the_stock_rule():
    stock = _stock_rule()
    step = gated_delta_step.make_decode_step(stock)
    # One key head per value head (5.2-5.9's layers repeat the key heads before calling the rule); grouped value
    # heads where the rule repeats them itself (from 5.16).
    grouped = "repeat_interleave" in inspect.getsource(stock)
    for key_heads in (4, 2) if grouped else (4,):
        inputs = _token(key_heads=key_heads)
        (want, want_state), (got, got_state) = _call(stock, inputs), _call(step, inputs)
        assert got.shape == want.shape and got_state.shape == want_state.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got_state, want_state, rtol=1e-5, atol=1e-6)


def test_everything_but_one_float32_token_with_a_state_goes_to_the_stock_rule():
    calls = []

    def stock(*args, **kwargs):
        calls.append(kwargs)
        return "stock", None

    step = gated_delta_step.make_decode_step(stock)
    assert _call(step, _token(length=5))[0] == "stock"  # a prompt
    assert _call(step, {**_token(), "initial_state": None})[0] == "stock"  # no state yet
    assert _call(step, _token(dtype=torch.bfloat16))[0] == "stock"  # half precision: stock's own casts
    inputs = _token()
    assert step(inputs["query"], inputs["key"], inputs["value"], g=inputs["g"], beta=inputs["beta"],
                initial_state=inputs["initial_state"], cu_seqlens=torch.tensor([0, 1]))[0] == "stock"
    assert len(calls) == 4 and calls[-1]["cu_seqlens"] is not None
    assert _call(step, _token())[0] != "stock" and len(calls) == 4


@pytest.mark.parametrize("patch", gated_delta_step.PATCHES, ids=lambda p: p.name)
def test_a_model_built_under_the_step_decodes_like_stock(patch):
    _stock_rule()
    verdict = parity_stock.compare_patch(patch, models=None, tolerances=TOLERANCES, seed=0)
    assert verdict.status is Status.PASS, verdict
    kind = "moe" if patch.name.endswith("_moe") else "text"
    assert verdict.metrics[f"{kind}/float32"]["decode_logits_max_abs_err"] > 0  # the patched step ran


def _without_decay(stock):
    step = gated_delta_step.make_decode_step(stock)

    def broken(query, key, value, g, beta, **kwargs):
        return step(query, key, value, g=torch.zeros_like(g) if query.shape[1] == 1 else g, beta=beta, **kwargs)

    return broken


def test_a_step_that_forgets_the_decay_fails_parity():
    _stock_rule()
    real = gated_delta_step.PATCHES[0]
    broken = gated_delta_step.TorchGatedDeltaPatch(name=real.name, target=real.target, replacement=None,
                                                   make=_without_decay, versions=SpecifierSet(">=5.2"))
    verdict = parity_stock.compare_patch(broken, models=None, tolerances=FP32, seed=0)
    assert verdict.status is Status.FAIL and "decode logits error" in verdict.message, verdict
    assert not broken.applied
