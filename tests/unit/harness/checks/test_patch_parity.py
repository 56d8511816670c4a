"""patch-parity can fail: a perturbing patch, a leaking packed forward, a wrong temperature, a
renamed target and a rollout engine whose log-probs are off each make their verdict fail; the
real check passes."""
from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

torch = pytest.importorskip("torch")

from harness.checks import CheckOptions
from harness.checks.patch_parity import TOLERANCES, run
from harness.checks.patch_parity import audit as parity_audit
from harness.checks.patch_parity import fused as parity_fused
from harness.checks.patch_parity import packed as parity_packed
from harness.checks.patch_parity import stock as parity_stock
from harness.checks.patch_parity.inputs import Models
from harness.results.records import Status
from trainers.patches.base import DelegatingPatch, Patch
from trainers.patches.fused_logprob import logprobs_and_entropy

FP32 = {"float32": TOLERANCES["float32"]}
QWEN35 = "transformers.models.qwen3_5.modeling_qwen3_5"


@pytest.fixture(scope="module")
def models():
    from trainers.models import Qwen35Unavailable

    torch.set_num_threads(1)
    zoo = Models(seed=0)
    try:
        zoo.get("text")
    except Qwen35Unavailable as exc:
        pytest.skip(str(exc))
    return zoo


def _perturbing_rms_norm(stock):
    def forward(self, x):
        return stock(self, x) + 1e-2

    return forward


def test_patch_that_perturbs_outputs_fails(models):
    broken = DelegatingPatch(name="broken-rms-norm", target=f"{QWEN35}:Qwen3_5RMSNorm.forward", replacement=None,
                             make=_perturbing_rms_norm, versions=SpecifierSet(">=5.2"))
    verdict = parity_stock.compare_patch(broken, models, FP32, seed=0, kinds=("text",))
    assert verdict.status is Status.FAIL, verdict
    assert verdict.metrics["text/float32"]["logits_max_abs_err"] > 1e-3


def test_faithful_patch_passes(models):
    faithful = DelegatingPatch(name="same-rms-norm", target=f"{QWEN35}:Qwen3_5RMSNorm.forward", replacement=None,
                               make=lambda stock: (lambda self, x: stock(self, x)), versions=SpecifierSet(">=5.2"))
    assert parity_stock.compare_patch(faithful, models, FP32, seed=0, kinds=("text",)).status is Status.PASS


def _leaking_gated_delta_net(stock):
    """Runs the stock layer over the whole packed row, ignoring the boundaries."""
    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        for key in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx"):
            kwargs.pop(key, None)
        return stock(self, hidden_states, cache_params=None, attention_mask=attention_mask, **kwargs)

    return forward


def test_leaking_packed_forward_fails(models):
    leaking = DelegatingPatch(name="leaking-packed", target=f"{QWEN35}:Qwen3_5GatedDeltaNet.forward",
                              replacement=None, make=_leaking_gated_delta_net, versions=SpecifierSet(">=5.2"))
    verdicts = parity_packed.packed_vs_unpacked(models, FP32, kinds=("text",), lengths=(7, 65), patches=[leaking])
    assert [v.status for v in verdicts] == [Status.FAIL], verdicts
    errors = verdicts[0].metrics["float32"]["max_abs_err_per_sequence"]
    assert errors[0] < 1e-5 < errors[1]  # the first sequence has nothing before it to leak from


def test_real_packed_forward_passes(models):
    verdicts = parity_packed.packed_vs_unpacked(models, FP32, kinds=("text",), lengths=(7, 65))
    assert [v.status for v in verdicts] == [Status.PASS], verdicts


def test_fused_forward_with_wrong_temperature_fails(models):
    def ignores_temperature(model, input_ids, temperature=1.0, **kwargs):
        return logprobs_and_entropy(model, input_ids, temperature=1.0, **kwargs)

    verdicts = parity_fused.fused_verdicts(models, FP32, kinds=("text",), temperatures=(0.7, 1.0),
                                           fused_fn=ignores_temperature)
    assert [v.status for v in verdicts] == [Status.FAIL, Status.PASS], verdicts


def test_renamed_target_fails_naming_it_and_absent_packages_skip():
    renamed = Patch(name="renamed", target=f"{QWEN35}:Qwen3_5GatedDeltaNet.forward_v2", replacement=None,
                    versions=SpecifierSet(">=5.2"))
    verdict = parity_audit.audit_patch(renamed)
    if verdict.status is Status.SKIP:
        pytest.skip(verdict.message)  # no Qwen3.5 in this transformers
    assert verdict.status is Status.FAIL and "Qwen3_5GatedDeltaNet.forward_v2" in verdict.message

    absent = Patch(name="absent", target="not_an_installed_package.module:Thing.method", replacement=None,
                   distribution="not-an-installed-package")
    assert parity_audit.audit_patch(absent).status is Status.SKIP
    gated = Patch(name="gated", target=f"{QWEN35}:Qwen3_5GatedDeltaNet.forward_v2", replacement=None,
                  versions=SpecifierSet("<5.0"))
    verdict = parity_audit.audit_patch(gated)
    assert verdict.status is Status.SKIP and "not applicable" in verdict.message


class _OffByEngine:
    """An engine that samples correctly but reports log-probs shifted by 1e-2."""

    def __init__(self, real):
        self.real = real

    def generate(self, *args, **kwargs):
        batch = self.real.generate(*args, **kwargs)
        batch.logprobs = torch.where(batch.response_mask.bool(), batch.logprobs + 1e-2, batch.logprobs)
        return batch


def test_rollout_with_wrong_logprobs_fails(models):
    from trainers.rollout import make_rollout

    def off_by(engine, model):
        return _OffByEngine(make_rollout(engine, model))

    assert parity_fused.rollout_vs_trainer(models, FP32, make_rollout=off_by)[0].status is Status.FAIL
    assert parity_fused.rollout_vs_trainer(models, FP32)[0].status is Status.PASS


@pytest.mark.slow
def test_real_check_passes_and_records_upstream_packing(models, monkeypatch):
    """Run as a CUDA cell's check would see its device: the numbers are still the CPU's, and the message says so."""
    import transformers

    from trainers.runtime import device

    monkeypatch.setattr(device, "detect_device_type", lambda requested=None: "cuda")
    result = run(CheckOptions())
    failed = [(v.name, v.message) for v in result.verdicts if v.status.is_failure]
    assert result.status is Status.PASS, failed
    assert result.message.endswith("computed on the CPU, not on the cell's cuda: patch-parity does not follow the "
                                   "device")
    assert (result.metrics["device"], result.metrics["cell_device"]) == ("cpu", "cuda")
    verdicts = {v.name: v for v in result.verdicts}
    for name in ("packed-vs-unpacked:text", "packed-vs-unpacked:vl", "packed-vs-unpacked:moe",
                 "fused-logprob:T=0.7", "fused-logprob:T=1.0", "rollout-vs-trainer:hf",
                 "patched-vs-stock:fused-logprob:Qwen3_5ForCausalLM",
                 "patched-vs-stock:packed-forward:Qwen3_5GatedDeltaNet"):
        assert verdicts[name].status is Status.PASS, verdicts[name]
    # What stock transformers does on CPU (no flash-linear-attention / causal-conv1d here):
    # position ids alone never keep Gated DeltaNet apart; packed kwargs are ignored by 5.3.0
    # (silent leak) and refused by 5.23.0 (nothing to measure).
    assert verdicts["packed-stock-upstream-position-ids"].status is Status.AFFECTED
    kwargs_verdict = verdicts["packed-stock-upstream"]
    measured = {"5.3.0": Status.AFFECTED, "5.23.0": Status.SKIP}.get(transformers.__version__)
    assert kwargs_verdict.status in ((measured,) if measured else (Status.AFFECTED, Status.SKIP)), kwargs_verdict


def test_a_cpu_cells_message_says_nothing_of_devices():
    from harness.checks.patch_parity import on_the_cpu

    assert on_the_cpu("all patches match stock (3 pass)", "cpu") == "all patches match stock (3 pass)"
    assert "not on the cell's npu" in on_the_cpu("all patches match stock (3 pass)", "npu")


def test_stock_side_runs_once_and_every_broken_patch_still_fails(models, monkeypatch):
    """The stock numbers are kept per (kind, dtype, probe): a second patch compares against them
    without running stock again, and is still caught."""
    calls = []
    probe = parity_stock._logits_probe
    monkeypatch.setattr(parity_stock, "_logits_probe", lambda *a: calls.append(1) or probe(*a))
    fresh = Models(seed=0)
    for name in ("broken-rms-norm-a", "broken-rms-norm-b"):
        broken = DelegatingPatch(name=name, target=f"{QWEN35}:Qwen3_5RMSNorm.forward", replacement=None,
                                 make=_perturbing_rms_norm, versions=SpecifierSet(">=5.2"))
        assert parity_stock.compare_patch(broken, fresh, FP32, seed=0, kinds=("text",)).status is Status.FAIL
    assert len(calls) == 3  # stock once, then each patched side
