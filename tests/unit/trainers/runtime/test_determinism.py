"""trainers.runtime.determinism: the settings per device, a copy a caller cannot change, and `apply` turning on
torch's deterministic algorithms while keeping what the user exported."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from trainers.runtime import determinism  # noqa: E402


def test_determinism_settings_per_device():
    assert determinism.environment("cpu") == {}
    assert determinism.environment("cuda")["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert determinism.environment("npu")["HCCL_DETERMINISTIC"] == "true"
    determinism.environment("cuda")["NCCL_ALGO"] = "Tree"  # a copy: the table cannot be changed by a caller
    assert determinism.environment("cuda")["NCCL_ALGO"] == "Ring"
    with pytest.raises(ValueError, match="unknown device"):
        determinism.environment("tpu")


def test_apply_turns_on_deterministic_algorithms(monkeypatch):
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    monkeypatch.delenv("HCCL_DETERMINISTIC", raising=False)
    monkeypatch.setenv("CLOSE_MATMUL_K_SHIFT", "0")  # exported by the user: kept
    try:
        settings = determinism.apply("npu")
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["HCCL_DETERMINISTIC"] == "true" and settings["CLOSE_MATMUL_K_SHIFT"] == "0"
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
