"""gate-precision's verl part, with the installed verl (`nox -s tests-verl`): verl's apply_fsdp2 with its engine's
bf16 policy rounds A_log and dt_bias (affected, attributed to verl's code); verl's wrapping broken so that it makes no
FSDP2 unit fails the verdict instead of passing it."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

pytestmark = pytest.mark.verl  # nox -s tests-verl runs it in the verl-dev cell's pins

from harness.checks import CheckOptions
from harness.checks.gate_precision import probes, verl_policy
from harness.checks.support import verl as verl_support
from harness.results.records import Status
from trainers.runtime.device import plan as device_plan


@pytest.fixture(autouse=True)
def qwen35():
    from qwen35_helpers import qwen35_or_skip

    qwen35_or_skip()
    torch.set_num_threads(1)


def _verdict(tmp_path):
    plan = dataclasses.replace(device_plan("cpu"), mixed_precision=True)
    with probes.one_rank_mesh(plan.type, plan.dist_backend) as mesh:
        return verl_support.attributed(verl_policy.verdict(CheckOptions(work_dir=tmp_path), plan, mesh))


def test_verl_rounds_the_gates_with_its_own_code(tmp_path):
    found = _verdict(tmp_path)
    assert found.name == "verl:fsdp2-policy" and found.status is Status.AFFECTED, found.message
    assert "bfloat16 in the forward: model.layers.*.linear_attn.A_log" in found.message
    assert found.metrics["verl"]["ran"] == ["verl.utils.fsdp_utils.apply_fsdp2"]
    assert found.metrics["fp32_in_forward"] == []


def test_verl_wrapping_that_shards_nothing_fails(monkeypatch, tmp_path):
    import verl.utils.fsdp_utils as fsdp_utils

    monkeypatch.setattr(fsdp_utils, "fully_shard", lambda module, **kwargs: module)  # verl's wrapping broken
    found = _verdict(tmp_path)
    assert found.status is Status.FAIL and "no FSDP2 unit was made" in found.message
