"""trainers.patches.gated_delta_chunk: the fitted Gated DeltaNet chunk: the right chunk sizes, parity with the
stock rule, and a broken rule (or one-chunk form) caught by patch-parity's comparison."""
from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

torch = pytest.importorskip("torch")

from qwen35_helpers import qwen35_or_skip  # noqa: E402

from harness.checks.patch_parity import TOLERANCES  # noqa: E402
from harness.checks.patch_parity import chunk as parity_chunk  # noqa: E402
from harness.checks.patch_parity import stock as parity_stock  # noqa: E402
from harness.results.records import Status  # noqa: E402
from trainers.patches import gated_delta_chunk  # noqa: E402
from trainers.patches.base import DelegatingPatch  # noqa: E402

RULE = "transformers.models.qwen3_5.modeling_qwen3_5:torch_chunk_gated_delta_rule"


FP32 = {"float32": TOLERANCES["float32"]}


@pytest.mark.parametrize("length, chunk", [(1, 16), (14, 16), (16, 16), (17, 32), (33, 64), (64, 64), (500, 64)])
def test_fitted_chunk_is_the_smallest_power_of_two_that_holds_the_sequence(length, chunk):
    assert gated_delta_chunk.fitted_chunk_size(length) == chunk


def test_fitted_rule_passes_the_fitted_chunk_to_the_stock_rule():
    seen = []

    def stock(query, key, value, *args, chunk_size=64, **kwargs):
        seen.append(chunk_size)
        return "out"

    fitted = gated_delta_chunk._make_fitted(stock)
    for length in (14, 40, 100):
        assert fitted(torch.zeros(1, length, 2, 4), None, None) == "out"
    assert seen == [16, 64, 64]


def test_fitted_chunk_matches_the_stock_rule(monkeypatch):
    qwen35_or_skip()
    ran = []
    one_chunk = gated_delta_chunk.one_chunk_rule
    monkeypatch.setattr(gated_delta_chunk, "one_chunk_rule", lambda *a, **k: ran.append(1) or one_chunk(*a, **k))
    patch = next(p for p in gated_delta_chunk.PATCHES if p.name.endswith(":qwen3_5"))
    verdict = parity_stock.compare_patch(patch, models=None, tolerances=FP32, seed=0)
    assert verdict.status is Status.PASS, verdict
    # The rule on lengths around the chunk sizes, and a model built under the patch (grouped value heads).
    assert set(verdict.metrics) == {f"L{n}/float32" for n in parity_chunk.LENGTHS} | {"text/float32"}
    # The one-chunk form ran (counted, not inferred from rounding: some CPUs round both forms alike).
    assert ran


def _without_decay(stock):
    """A 'faster' rule that forgets the gate's decay: right shapes, wrong recurrence."""
    def rule(query, key, value, *args, g=None, **kwargs):
        return stock(query, key, value, *args, g=torch.zeros_like(g), **kwargs)

    return rule


def test_a_broken_chunk_rule_fails_parity():
    qwen35_or_skip()
    broken = DelegatingPatch(name="gated-delta-chunk:broken", target=RULE, replacement=None, make=_without_decay,
                             versions=SpecifierSet(">=5.2"))
    verdict = parity_stock.compare_patch(broken, models=None, tolerances=FP32, seed=0)
    assert verdict.status is Status.FAIL, verdict
    assert "output error" in verdict.message
    assert not broken.applied  # compared inside a context: removed again


def test_a_broken_one_chunk_form_fails_parity(monkeypatch):
    qwen35_or_skip()
    right = gated_delta_chunk.one_chunk_rule
    monkeypatch.setattr(gated_delta_chunk, "one_chunk_rule",
                        lambda query, key, value, g, beta, *args: right(query, key, value, g * 0, beta, *args))
    patch = next(p for p in gated_delta_chunk.PATCHES if p.name.endswith(":qwen3_5"))
    verdict = parity_stock.compare_patch(patch, models=None, tolerances=FP32, seed=0)
    assert verdict.status is Status.FAIL, verdict
    assert "length 14/float32: output error" in verdict.message and "train logits error" in verdict.message
    assert "length 100/float32" not in verdict.message  # longer than a chunk: the stock rule, fitted
