"""The Gated DeltaNet causal conv patch: the rewrite equals the convolution it replaces, a model built
under it matches one built without it (5.2-5.9 bind the conv at build, later releases look it up),
a broken conv fails that parity, and calls the rewrite does not cover go to the stock function.

Marked `versions`: the targets differ by release (an empty slot filled in 5.2-5.9, a torch function
replaced from 5.16), so `nox -s tests-affected` runs these on 5.3.0 as well as the newest."""
from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

torch = pytest.importorskip("torch")

from qwen35_helpers import qwen35_or_skip  # noqa: E402

F = torch.nn.functional

from harness.checks.patch_parity import TOLERANCES  # noqa: E402
from harness.checks.patch_parity import stock as parity_stock  # noqa: E402
from harness.results.records import Status  # noqa: E402
from trainers.patches import causal_conv, training  # noqa: E402
from trainers.patches.base import resolve  # noqa: E402

pytestmark = pytest.mark.versions
FP32 = {"float32": TOLERANCES["float32"]}


def _patch(name: str):
    return next(p for p in causal_conv.PATCHES if p.name == name)


def _reference_conv(x, weight, bias):
    return F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])[..., :x.shape[-1]]


@pytest.mark.parametrize("length", [1, 3, 4, 14])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("layer_layout", [False, True])
def test_rewrite_equals_the_depthwise_convolution_forward_and_backward(length, with_bias, layer_layout):
    gen = torch.Generator().manual_seed(length)
    if layer_layout:  # as the Gated DeltaNet layer hands it in: its (batch, length, channels) projection, transposed
        x = torch.randn(3, length, 10, generator=gen).transpose(1, 2).requires_grad_()
    else:
        x = torch.randn(3, 10, length, generator=gen, requires_grad=True)
    weight = torch.randn(10, 4, generator=gen, requires_grad=True)
    bias = torch.randn(10, generator=gen, requires_grad=True) if with_bias else None
    leaves = [t for t in (x, weight, bias) if t is not None]
    cot = torch.randn(3, 10, length, generator=gen)
    want = F.silu(_reference_conv(x, weight, bias))
    want_grads = torch.autograd.grad((want * cot).sum(), leaves)
    got = causal_conv.depthwise_causal_conv(x, weight, bias, silu=True)
    got_grads = torch.autograd.grad((got * cot).sum(), leaves)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert got.transpose(1, 2).is_contiguous(), "the layer's transpose back would copy: not computed time-major"


@pytest.mark.parametrize("length", [1, 3])
def test_update_shifts_the_state_and_equals_the_convolution_over_it(length):
    gen = torch.Generator().manual_seed(1)
    state = torch.randn(2, 6, 4, generator=gen)
    x = torch.randn(2, 6, length, generator=gen)
    weight = torch.randn(6, 4, generator=gen)
    joined = torch.cat([state, x], -1)
    want = F.silu(F.conv1d(joined, weight.unsqueeze(1), groups=6)[..., -length:])
    update = causal_conv.make_conv_update(None)  # 5.2-5.9: the slot is empty, SiLU always
    got = update(x, state, weight, None, "silu")
    torch.testing.assert_close(got, want)
    assert torch.equal(state, joined[..., -4:])


def test_calls_the_rewrite_does_not_cover_go_to_the_stock_function():
    calls = []

    def stock(*args, **kwargs):
        calls.append(kwargs)
        return "stock"

    fn, update = causal_conv.make_conv_fn(stock), causal_conv.make_conv_update(stock)
    x, weight = torch.randn(1, 4, 5), torch.randn(4, 4)
    assert fn(x, weight, None, activation="gelu") == "stock"
    assert fn(x, weight, None, activation="silu", seq_idx=torch.zeros(1, 5, dtype=torch.int32)) == "stock"
    assert update(x[..., :1], torch.zeros(1, 4, 3), weight, None, "relu") == "stock"
    assert len(calls) == 3
    torch.testing.assert_close(fn(x, weight, None, activation="silu"), F.silu(_reference_conv(x, weight, None)))
    torch.testing.assert_close(fn(x, weight, None, activation=None), _reference_conv(x, weight, None))
    assert len(calls) == 3


@pytest.mark.parametrize("name", [p.name for p in causal_conv.PATCHES])
def test_a_model_built_under_the_patch_matches_stock(name, monkeypatch):
    qwen35_or_skip()
    ran = []
    for helper in ("depthwise_causal_conv", "_finish"):  # the rewrite's own arithmetic, on either path
        original = getattr(causal_conv, helper)
        monkeypatch.setattr(causal_conv, helper, lambda *a, _f=original, **k: ran.append(1) or _f(*a, **k))
    verdict = parity_stock.compare_patch(_patch(name), models=None, tolerances=TOLERANCES, seed=0)
    assert verdict.status is Status.PASS, verdict
    kind = "moe" if name.endswith("_moe") else "text"
    assert set(verdict.metrics) == {f"{kind}/float32", f"{kind}/bfloat16"}
    # The patch ran (counted, not inferred from rounding: some CPUs round oneDNN's conv and the rewrite alike).
    assert ran


def _drop_last_tap(make):
    def broken_make(stock):
        rewrite = make(stock)

        def broken(*args, **kwargs):
            args = list(args)
            index = 2 if len(args) > 2 and args[1].dim() == 3 else 1  # update: (x, state, weight, ...)
            if len(args) > index:
                args[index] = torch.cat([args[index][:, :-1], torch.zeros_like(args[index][:, -1:])], -1)
            else:
                kwargs["weight"] = torch.cat([kwargs["weight"][:, :-1], torch.zeros_like(kwargs["weight"][:, -1:])], -1)
            return rewrite(*args, **kwargs)

        return broken

    return broken_make


@pytest.mark.parametrize("name, probe", [("causal-conv1d:qwen3_5", "train"),
                                         ("causal-conv1d-update:qwen3_5", "decode")])
def test_a_conv_that_drops_a_tap_fails_parity(name, probe):
    qwen35_or_skip()
    real = _patch(name)
    broken = causal_conv.CausalConvPatch(name=name, target=real.target, replacement=None,
                                         make=_drop_last_tap(real.make), versions=SpecifierSet(">=5.2"))
    verdict = parity_stock.compare_patch(broken, models=None, tolerances=FP32, seed=0)
    assert verdict.status is Status.FAIL, verdict
    assert f"{probe} logits error" in verdict.message
    assert not broken.applied


def test_patches_built_against_one_model_share_its_stock_side(monkeypatch):
    """The model built without a patch is built and probed once per (kind, dtype, seed) for every patch compared on
    it (Models.built_stock); a broken patch still fails against that shared stock side."""
    qwen35_or_skip()
    from harness.checks.patch_parity import built
    from harness.checks.patch_parity.inputs import Models
    from trainers.models import ONE_OF_EACH

    stock_sides = []
    real_side = built._stock_side
    monkeypatch.setattr(built, "_stock_side", lambda *args: stock_sides.append(args) or real_side(*args))
    models = Models(0)
    names = ("causal-conv1d:qwen3_5", "causal-conv1d-update:qwen3_5")
    verdicts = [parity_stock.compare_patch(_patch(name), models, FP32, seed=0) for name in names]
    assert [v.status for v in verdicts] == [Status.PASS, Status.PASS], verdicts
    assert stock_sides == [("text", "float32", ONE_OF_EACH, 0)]  # once, for both patches, at the check's depth
    real = _patch(names[0])
    broken = causal_conv.CausalConvPatch(name=real.name, target=real.target, replacement=None,
                                         make=_drop_last_tap(real.make), versions=SpecifierSet(">=5.2"))
    assert parity_stock.compare_patch(broken, models, FP32, seed=0).status is Status.FAIL
    assert len(stock_sides) == 1


def test_the_trainer_applies_the_conv_patches_and_removes_them():
    qwen35_or_skip()
    owners = {p.name: resolve(p.target) for p in causal_conv.PATCHES}
    stock = {name: getattr(owner, attr) for name, (owner, attr) in owners.items()}
    applied = training.apply_for("cpu")
    try:
        assert {p.name for p in causal_conv.PATCHES} <= set(applied.names)
        assert all(getattr(*owners[name]) is not stock[name] for name in owners)
    finally:
        applied.remove()
    assert all(getattr(*owners[name]) is stock[name] for name in owners)


def test_not_applicable_where_causal_conv1d_is_installed(monkeypatch):
    qwen35_or_skip()
    real_find_spec = causal_conv.importlib.util.find_spec
    monkeypatch.setattr(causal_conv.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "causal_conv1d" else real_find_spec(name, *a))
    applicable, reason = _patch("causal-conv1d:qwen3_5").applicable()
    assert not applicable and "causal-conv1d is installed" in reason
