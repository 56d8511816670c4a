"""trainers.patches.training: the patch set a trainer applies on each device, applied and removed cleanly, every
selected patch applied or said not to apply."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from qwen35_helpers import qwen35_or_skip  # noqa: E402

from trainers.patches import training  # noqa: E402
from trainers.patches.base import resolve  # noqa: E402

RULE = "transformers.models.qwen3_5.modeling_qwen3_5:torch_chunk_gated_delta_rule"


def test_training_patch_set_per_device_applies_and_removes_cleanly():
    qwen35_or_skip()
    owner, attr = resolve(RULE)
    stock = getattr(owner, attr)
    cpu = training.apply_for("cpu")
    try:
        names = cpu.names
        assert any(n.startswith("gated-delta-chunk:") for n in names)
        assert any(n.startswith("fused-logprob:") for n in names)
        assert not any(n.startswith("npu-") for n in names)
        assert getattr(owner, attr) is not stock
        # Every selected patch is either applied or listed with the reason it does not apply.
        assert {p.name for p in training.selected("cpu")} == set(names) | set(cpu.not_applicable)
        assert all(reason for reason in cpu.not_applicable.values())
        again = training.apply_for("cpu")  # already applied: left to the first owner
        assert again.names == [] and again.not_applicable == cpu.not_applicable
    finally:
        cpu.remove()
    assert getattr(owner, attr) is stock and cpu.names == []
    npu = training.selected("npu")
    assert any(p.name.startswith("npu-") for p in npu) and len(npu) > len(training.selected("cpu"))
