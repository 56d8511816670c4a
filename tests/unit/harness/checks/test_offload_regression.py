"""The meta-device offload emulation and the offload-regression check.

Expectations follow the installed transformers: 5.2-5.8 have the position-embedding bug
(upstream `affected`), later releases do not (upstream `pass`); the trainer verdict passes
everywhere, and fails when the trainer runs the unpatched method where the bug exists.
"""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version
from torch import nn

from harness.checks import CheckOptions, offload_regression
from harness.checks.offload_regression import fsdp_worker as worker
from harness.checks.offload_regression.emulation import (
    EmulatedDeviceMismatch,
    emulate_cpu_offload,
    record_embedding_calls,
)
from harness.results.records import Status, Verdict
from trainers.patches.base import Patch, installed_version

pytestmark = pytest.mark.versions  # nox -s tests-affected runs these on a buggy transformers

TRANSFORMERS = installed_version("transformers")
BUGGY = Version("5.2") <= TRANSFORMERS < Version("5.9")
QWEN35 = TRANSFORMERS >= Version("5.2")
needs_qwen35 = pytest.mark.skipif(not QWEN35, reason="no Qwen3.5 in this transformers")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _options(tmp_path, **kw) -> CheckOptions:
    return CheckOptions(model="vl", work_dir=tmp_path, **kw)


def test_emulation_restores_the_module_exactly():
    embedding = nn.Embedding(6, 3)
    weight, pre, post = embedding.weight, dict(embedding._forward_pre_hooks), dict(embedding._forward_hooks)
    with emulate_cpu_offload(embedding) as emulation:
        assert embedding.weight.device.type == "meta"
        out = embedding(torch.tensor([1, 2, 2]))
        assert embedding.weight.device.type == "meta"  # offloaded again after the call
        out.sum().backward()
        with pytest.raises(EmulatedDeviceMismatch):
            embedding(torch.tensor([0], device="meta"))
        assert embedding.weight.device.type == "meta"  # also after a failed call
    assert embedding.weight is weight
    assert dict(embedding._forward_pre_hooks) == pre and dict(embedding._forward_hooks) == post
    assert torch.equal(weight.grad[2], torch.full((3,), 2.0))  # gradients reach the real weight
    assert [c.mismatch for c in emulation.calls] == [False, True]


def test_recorder_sees_the_devices_of_each_call():
    embedding = nn.Embedding(4, 2)
    with record_embedding_calls(embedding) as calls:
        embedding(torch.tensor([0, 3]))
    assert [c.to_dict() for c in calls] == [
        {"input_devices": ["cpu"], "weight_device": "cpu", "weight_kind": "Parameter", "mismatch": False}]
    assert not embedding._forward_pre_hooks


@needs_qwen35
@pytest.mark.parametrize("patched", [False, True], ids=["stock", "patched"])
def test_emulation_reproduces_the_bug_only_with_stock_buggy_code(patched):
    from trainers.models import build_model

    model = build_model("vl")
    batch = worker.vision_batch(model.config, 0, torch.device("cpu"))
    reference = worker.vision_step(model, batch)
    patches = worker.trainer_patches("project") if patched else []
    assert bool(patches) == (patched and BUGGY)
    with worker.patches_applied(patches), emulate_cpu_offload(model.model.visual.pos_embed) as emulation:
        if BUGGY and not patched:
            with pytest.raises(EmulatedDeviceMismatch):
                worker.vision_step(model, batch)
            assert emulation.mismatches and emulation.mismatches[0].input_devices == ["meta"]
        else:
            assert worker.vision_step(model, batch) == reference
            assert emulation.calls and not emulation.mismatches


@needs_qwen35
def test_check_verdicts_follow_the_installed_version(tmp_path):
    result = offload_regression.run(_options(tmp_path), real_fsdp=False)
    verdicts = {v.name: v for v in result.verdicts}
    assert set(verdicts) == {"upstream", "trainer"}
    assert all(v.emulated and "emulated" in v.message for v in verdicts.values())
    assert verdicts["trainer"].status is Status.PASS
    if BUGGY:
        assert verdicts["upstream"].status is Status.AFFECTED
        assert result.status is Status.AFFECTED
        assert verdicts["upstream"].metrics["error_class"] == "EmulatedDeviceMismatch"
        assert "fast_pos_embed_interpolate" in verdicts["upstream"].metrics["error_site"]
    else:
        assert verdicts["upstream"].status is Status.PASS
        assert result.status is Status.PASS
    assert result.metrics["decided_by"] == "meta-emulation"


@needs_qwen35
def test_check_fails_when_the_trainer_runs_the_unpatched_method(tmp_path):
    result = offload_regression.run(_options(tmp_path), trainer_method="stock", real_fsdp=False)
    trainer = next(v for v in result.verdicts if v.name == "trainer")
    if BUGGY:
        assert trainer.status is Status.FAIL and result.status is Status.FAIL
        assert any(c["mismatch"] for c in trainer.metrics["calls"])
    else:  # upstream fixed it: there is nothing to break, stock code passes
        assert trainer.status is Status.PASS and result.status is Status.PASS


@needs_qwen35
def test_check_fails_on_a_patch_that_silently_changes_the_numbers(tmp_path, monkeypatch):
    """A patch that fixes the device but scales the embedding: no error, wrong numbers."""
    good = worker.trainer_patches("project")
    if not good:
        pytest.skip("no position-embedding patch applies to this transformers: nothing to break")

    def scaled(self, grid_thw):
        return good[0].replacement(self, grid_thw) * 1.01

    broken = [Patch(p.name + ":scaled", p.target, scaled, versions=p.versions) for p in good]
    monkeypatch.setattr(worker, "trainer_patches", lambda method: broken)
    result = offload_regression.run(_options(tmp_path), real_fsdp=False)
    trainer = next(v for v in result.verdicts if v.name == "trainer")
    assert trainer.status is Status.FAIL and result.status is Status.FAIL
    assert not trainer.metrics["raised"]


def test_check_skips_without_qwen35(tmp_path, monkeypatch):
    import trainers.models

    def unavailable(*args, **kwargs):
        raise trainers.models.Qwen35Unavailable("Qwen3.5 (vl) is unavailable in transformers 5.1.0: no module")

    monkeypatch.setattr(trainers.models, "build_config", unavailable)
    result = offload_regression.run(_options(tmp_path), real_fsdp=False)
    assert result.status is Status.SKIP and not result.verdicts


def test_overall_status_rule():
    def v(name, status):
        return Verdict(name, status)

    rule = offload_regression.overall
    assert rule([v("upstream", Status.AFFECTED), v("trainer", Status.PASS)]) is Status.AFFECTED
    assert rule([v("upstream", Status.PASS), v("trainer", Status.PASS)]) is Status.PASS
    assert rule([v("upstream", Status.AFFECTED), v("trainer", Status.FAIL)]) is Status.FAIL
    assert rule([v("upstream", Status.PASS), v("trainer", Status.PASS),
                 v("trainer/real-fsdp2", Status.FAIL)]) is Status.FAIL
    assert rule([v("upstream", Status.PASS), v("trainer", Status.PASS),
                 v("upstream/real-fsdp2", Status.CRASH)]) is Status.CRASH


@needs_qwen35
@pytest.mark.slow
def test_check_with_real_fsdp2_offload_on_two_ranks(tmp_path):
    """Real FSDP2 + CPUOffloadPolicy, 2 ranks (forked from the check's process on CPU). On CPU the
    compute device is the CPU, so even the stock code sees its index and weight on one device: evidence
    only, the emulation decides."""
    result = offload_regression.run(_options(tmp_path))
    verdicts = {v.name: v for v in result.verdicts}
    assert set(verdicts) == {"upstream", "trainer", "upstream/real-fsdp2", "trainer/real-fsdp2"}
    assert result.status is (Status.AFFECTED if BUGGY else Status.PASS)
    for name in ("upstream/real-fsdp2", "trainer/real-fsdp2"):
        real = verdicts[name]
        assert not real.emulated and real.status is Status.PASS, real.message
        # What the stock method reads outside pos_embed's forward: the CPU shard, a DTensor.
        assert real.metrics["outside"][0] == {"weight_kind": "DTensor", "weight_device": "cpu"}
        assert real.metrics["calls"][0]["weight_device"] == "cpu" and not real.metrics["calls"][0]["mismatch"]
    assert result.metrics["real_fsdp2"]["world_size"] == 2


@needs_qwen35
@pytest.mark.slow
def test_ranks_that_die_are_reported_not_hidden(tmp_path, monkeypatch):
    monkeypatch.setattr(offload_regression, "WORKER", "harness.checks._no_such_worker")
    result = offload_regression.run(_options(tmp_path))
    real = [v for v in result.verdicts if v.name.endswith("/real-fsdp2")]
    assert [v.status for v in real] == [Status.CRASH, Status.CRASH]
    assert result.status is Status.CRASH
