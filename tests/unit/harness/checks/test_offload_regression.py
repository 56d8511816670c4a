"""The offload-regression check: one verdict per site of the text, VL and MoE models.

Expectations follow the installed transformers: 5.2-5.8 have five sites under the strict device
emulation (upstream `affected`), later releases none (upstream `pass`); the trainer verdicts pass
everywhere, and fail when the trainer runs the stock methods in place of its offload fixes.
"""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from harness.checks import CheckOptions, offload_regression
from harness.checks.offload_regression import model_passes
from harness.results.records import Status, Verdict
from trainers.patches.base import Patch, installed_version

pytestmark = pytest.mark.versions  # nox -s tests-affected runs these on a buggy transformers

TRANSFORMERS = installed_version("transformers")
BUGGY = Version("5.2") <= TRANSFORMERS < Version("5.9")
QWEN35 = TRANSFORMERS >= Version("5.2")
needs_qwen35 = pytest.mark.skipif(not QWEN35, reason="no Qwen3.5 in this transformers")
# The sites of 5.2-5.8 (found on 5.3.0; the code is the same text from 5.2.0 to 5.8.x).
SITES_5_2_TO_5_8 = {
    "text:TextRotaryEmbedding<inv_freq",
    "moe:TextRotaryEmbedding<inv_freq",
    "vl:TextRotaryEmbedding<inv_freq",
    "vl:Embedding<new@fast_pos_embed_interpolate",
    "vl:VisionAttention<new@VisionRotaryEmbedding",
}


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def project_result(tmp_path_factory):
    """One run with the project's patch set (the check takes about 20-40 s on one thread)."""
    if not QWEN35:
        pytest.skip("no Qwen3.5 in this transformers")
    return offload_regression.run(_options(tmp_path_factory.mktemp("offload")), real_fsdp=False)


def _options(tmp_path, **kw) -> CheckOptions:
    return CheckOptions(model="text", work_dir=tmp_path, **kw)


def _by_side(result, side: str) -> dict[str, Verdict]:
    return {v.name.split(":", 1)[1]: v for v in result.verdicts if v.name.startswith(f"{side}:")}


@needs_qwen35
def test_sites_follow_the_installed_version(project_result):
    result = project_result
    verdicts = {v.name: v for v in result.verdicts}
    assert all(v.emulated and "emulated" in v.message for v in verdicts.values())
    # each names the set-up it ran, which leaves buffers on the host and is not verl's
    assert all("buffers left on the host with the offloaded parameters (not verl's set-up" in v.message
               and "as verl sets" not in v.message for v in verdicts.values())
    assert verdicts["trainer"].status is Status.PASS
    assert result.metrics["decided_by"] == "strict-emulation"
    upstream = _by_side(result, "upstream")
    if BUGGY:
        assert set(upstream) == SITES_5_2_TO_5_8
        assert all(v.status is Status.AFFECTED for v in upstream.values())
        assert verdicts["upstream"].status is Status.AFFECTED and result.status is Status.AFFECTED
        embedding = upstream["vl:Embedding<new@fast_pos_embed_interpolate"]
        assert "model.visual.pos_embed" in embedding.message and "fast_pos_embed_interpolate" in embedding.message
        assert "buffer model.rotary_emb.inv_freq" in upstream["text:TextRotaryEmbedding<inv_freq"].message
    else:
        assert upstream == {}
        assert verdicts["upstream"].status is Status.PASS and result.status is Status.PASS
    trainer = _by_side(result, "trainer")
    assert set(trainer) == set(upstream) and all(v.status is Status.PASS for v in trainer.values())


@needs_qwen35
def test_check_fails_when_the_trainer_runs_the_stock_methods(tmp_path):
    result = offload_regression.run(_options(tmp_path), trainer_method="stock", real_fsdp=False)
    trainer = _by_side(result, "trainer")
    aggregate = next(v for v in result.verdicts if v.name == "trainer")
    if BUGGY:
        assert set(trainer) == SITES_5_2_TO_5_8 and all(v.status is Status.FAIL for v in trainer.values())
        assert aggregate.status is Status.FAIL and result.status is Status.FAIL
    else:  # upstream fixed them: there is nothing to break, stock code passes
        assert trainer == {} and aggregate.status is Status.PASS and result.status is Status.PASS


@needs_qwen35
def test_check_fails_on_a_patch_set_that_silently_changes_the_numbers(tmp_path, monkeypatch):
    """A patch that scales the final norm's output: no device mix, wrong numbers under offload only."""
    from trainers.models import build_model

    good = model_passes.trainer_patches
    norm_cls = type(build_model("text").model.norm)
    stock_forward = norm_cls.forward
    target = f"{norm_cls.__module__}:{norm_cls.__name__}.forward"

    def scaled(self, hidden_states):
        out = stock_forward(self, hidden_states)
        return out * 1.01 if type(out).__name__ == "DeviceTensor" else out

    monkeypatch.setattr(model_passes, "trainer_patches",
                        lambda method, device_type="cpu": good(method, device_type) + [Patch("scaled", target, scaled)])
    result = offload_regression.run(_options(tmp_path), real_fsdp=False)
    trainer = next(v for v in result.verdicts if v.name == "trainer")
    assert trainer.status is Status.FAIL and result.status is Status.FAIL
    assert "numbers under offload differ" in trainer.message


def test_check_skips_without_qwen35(tmp_path, monkeypatch):
    import trainers.models

    def unavailable(*args, **kwargs):
        raise trainers.models.Qwen35Unavailable("Qwen3.5 (text) is unavailable in transformers 5.1.0: no module")

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
                 v("trainer:vl:Embedding<x", Status.FAIL)]) is Status.FAIL
    assert rule([v("upstream", Status.PASS), v("trainer", Status.PASS),
                 v("trainer/real-fsdp2", Status.FAIL)]) is Status.FAIL
    assert rule([v("upstream", Status.PASS), v("trainer", Status.PASS),
                 v("upstream/real-fsdp2", Status.CRASH)]) is Status.CRASH
