"""The gate-precision check on the installed transformers, one rank in this process: upstream rounds A_log and
dt_bias to bf16 (affected), the trainer keeps them float32 (pass); the trainer fails when its float32 units are
removed, when A_log alone is cast to bf16 (FSDP2 refuses the unit) and when the whole model comes in bf16 (the
gates are stored rounded); a release without Qwen3.5 is a skip."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from harness.checks import CheckOptions, gate_precision
from harness.results.records import Status
from trainers import models

pytestmark = pytest.mark.versions  # nox -s tests-affected runs these on transformers 5.3.0 too


@pytest.fixture(autouse=True)
def one_thread_no_group(qwen35):
    torch.set_num_threads(1)
    if dist.is_initialized():  # the check makes its own one-rank group and would use this one
        pytest.skip("a process group is already initialised in this process")


@pytest.fixture
def qwen35():
    from qwen35_helpers import qwen35_or_skip

    qwen35_or_skip()


@pytest.fixture
def text_only(monkeypatch):
    monkeypatch.setattr(gate_precision, "MODELS", ("text",))  # one model: the broken inputs need no second


def _by_name(result):
    return {v.name: v for v in result.verdicts}


def test_upstream_rounds_the_gates_and_the_trainer_keeps_them(tmp_path):
    result = gate_precision.run(CheckOptions(work_dir=tmp_path))
    found = _by_name(result)
    assert found["trainer"].status is Status.PASS, found["trainer"].message
    for kind in gate_precision.MODELS:
        assert {"model.layers.*.linear_attn.A_log", "model.layers.*.linear_attn.dt_bias"} <= set(
            found["trainer"].metrics[kind]["fp32_in_forward"])
        # the plain policy gathers every parameter in bf16
        assert found["upstream"].metrics[kind]["fp32_in_forward"] == []
    assert found["upstream"].status is Status.AFFECTED
    # no Qwen3.5 release from 5.2 to 5.24 declares its gates float32 (read from their modeling files)
    assert found["upstream/load"].status is Status.AFFECTED
    assert result.status is Status.AFFECTED and not dist.is_initialized()  # its group is gone
    drift = result.metrics["cast_drift"]["text"]
    assert set(drift) == {"bf16_gates_bf16", "bf16_gates_fp32", "fp32_gates_rounded"}
    assert 0 < drift["fp32_gates_rounded"]["max"] < drift["bf16_gates_bf16"]["max"]


def test_the_trainer_fails_without_its_float32_units(monkeypatch, tmp_path, text_only):
    from trainers.fsdp import parallelize

    monkeypatch.setattr(parallelize, "FP32_PARAMETERS", ())  # the trainer's float32 keeping removed
    result = gate_precision.run(CheckOptions(work_dir=tmp_path))
    trainer = _by_name(result)["trainer"]
    assert result.status is Status.FAIL and trainer.status is Status.FAIL
    assert "bfloat16 in the forward: model.layers.*.linear_attn.A_log" in trainer.message


def _built_with(monkeypatch, change):
    stock = models.build_model

    def build(*args, **kwargs):
        model = stock(*args, **kwargs)
        change(model)
        return model

    monkeypatch.setattr(models, "build_model", build)


def test_the_trainer_fails_on_a_gate_cast_to_bf16(monkeypatch, tmp_path, text_only):
    def cast_a_log(model):
        for module in model.modules():
            if isinstance(getattr(module, "A_log", None), torch.nn.Parameter):
                module.A_log.data = module.A_log.data.to(torch.bfloat16)

    _built_with(monkeypatch, cast_a_log)
    result = gate_precision.run(CheckOptions(work_dir=tmp_path))
    trainer = _by_name(result)["trainer"]
    assert result.status is Status.FAIL and trainer.status is Status.FAIL
    # FSDP2 refuses a unit whose parameters differ in dtype: said, not a crash of the check
    assert "raised AssertionError: FSDP expects uniform original parameter dtype" in trainer.message


def test_the_trainer_fails_on_a_model_loaded_in_bf16(monkeypatch, tmp_path, text_only):
    _built_with(monkeypatch, lambda model: model.to(torch.bfloat16))  # as from_pretrained(dtype=bfloat16) gives it
    result = gate_precision.run(CheckOptions(work_dir=tmp_path))
    trainer = _by_name(result)["trainer"]
    assert result.status is Status.FAIL and trainer.status is Status.FAIL
    # its float32 unit gathers the gates as float32, but their values and the parameters the optimizer steps on
    # are bf16
    assert "stored as bfloat16: model.layers.*.linear_attn.A_log, model.layers.*.linear_attn.dt_bias" in \
        trainer.message
    assert "in the forward" not in trainer.message


def test_no_qwen35_is_a_skip(monkeypatch, tmp_path):
    def unavailable(*args, **kwargs):
        raise models.Qwen35Unavailable("Qwen3.5 (text) is unavailable in transformers 5.1.0: no module")

    monkeypatch.setattr(models, "build_config", unavailable)
    result = gate_precision.run(CheckOptions(work_dir=tmp_path))
    assert result.status is Status.SKIP and result.verdicts == []
