"""The offload-regression check with real FSDP2 + CPUOffloadPolicy on 2 ranks, forked from the check's process
on CPU: both sides pass there (the strict device emulation decides), and ranks that die are reported."""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from harness.checks import CheckOptions, offload_regression
from harness.results.records import Status
from trainers.patches.base import installed_version

pytestmark = pytest.mark.versions  # nox -s tests-affected runs these on a buggy transformers

TRANSFORMERS = installed_version("transformers")
BUGGY = Version("5.2") <= TRANSFORMERS < Version("5.9")
QWEN35 = TRANSFORMERS >= Version("5.2")
needs_qwen35 = pytest.mark.skipif(not QWEN35, reason="no Qwen3.5 in this transformers")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _options(tmp_path, **kw) -> CheckOptions:
    return CheckOptions(model="text", work_dir=tmp_path, **kw)


@needs_qwen35
@pytest.mark.slow
def test_check_with_real_fsdp2_offload_on_two_ranks(tmp_path):
    """Real FSDP2 + CPUOffloadPolicy, 2 ranks (forked from the check's process on CPU). On CPU the
    compute device is the CPU, so even the stock code sees its index and weight on one device: these verdicts
    are recorded, the strict device emulation decides."""
    result = offload_regression.run(_options(tmp_path))
    verdicts = {v.name: v for v in result.verdicts}
    assert {"upstream", "trainer", "upstream/real-fsdp2", "trainer/real-fsdp2"} <= set(verdicts)
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
