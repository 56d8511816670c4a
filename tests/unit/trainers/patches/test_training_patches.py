"""The trainer's patch set and device settings: which patches a trainer applies on each device,
the fitted Gated DeltaNet chunk (right chunk sizes, parity with the stock rule, and a broken rule
caught), the one-rank sharding decision, and the determinism settings a cell's checks get."""
from __future__ import annotations

import os

import pytest
from packaging.specifiers import SpecifierSet

torch = pytest.importorskip("torch")

from qwen35_helpers import qwen35_or_skip  # noqa: E402

from harness.checks.patch_parity import TOLERANCES  # noqa: E402
from harness.checks.patch_parity import chunk as parity_chunk  # noqa: E402
from harness.checks.patch_parity import stock as parity_stock
from harness.results.records import Status  # noqa: E402
from trainers.fsdp.parallelize import should_shard  # noqa: E402
from trainers.patches import gated_delta_chunk, training  # noqa: E402
from trainers.patches.base import DelegatingPatch, resolve  # noqa: E402
from trainers.runtime import determinism  # noqa: E402

FP32 = {"float32": TOLERANCES["float32"]}
RULE = "transformers.models.qwen3_5.modeling_qwen3_5:torch_chunk_gated_delta_rule"


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


@pytest.mark.parametrize("world, offload, policy, expected", [
    (1, False, "auto", False), (1, True, "auto", True), (2, False, "auto", True), (1, False, "always", True)])
def test_one_rank_without_offload_is_not_sharded_unless_asked(world, offload, policy, expected):
    assert should_shard(world, offload, policy) is expected


def test_unknown_shard_policy_is_an_error():
    with pytest.raises(ValueError, match="shard policy"):
        should_shard(1, False, "sometimes")


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


def test_each_check_process_gets_its_devices_settings(monkeypatch, tmp_path):
    from harness.execution.cell import RunOptions, check_environment
    from harness.matrix import Cell

    opts = RunOptions(out_dir=tmp_path)
    cell = Cell("m", "c", {"device": "cuda", "backend": "fsdp", "model": "text"}, (), ())
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    env = check_environment(cell, opts)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and env["HARNESS_DEVICE"] == "cuda"
    assert "NCCL_ALGO" not in env  # exported: the check inherits the user's value unchanged
    cell = Cell("m", "c", {"device": "cpu", "backend": "fsdp", "model": "text"}, (), ())
    assert set(check_environment(cell, opts)) == {"HARNESS_DEVICE"}


def test_a_cpu_trainer_flushes_denormals_and_runs_one_thread():
    from trainers.runtime.device import cpu_trainer_settings

    tiny = torch.tensor([1e-40])  # below float32's smallest normal: a denormal
    torch.set_flush_denormal(False)
    assert float(tiny * 1.0) != 0.0  # by default arithmetic keeps it
    try:
        if not cpu_trainer_settings():
            pytest.skip("this CPU cannot flush denormals (no SSE3)")
        assert float(tiny * 1.0) == 0.0 and float(torch.exp(torch.tensor([-100.0]))) == 0.0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
    assert float(tiny * 1.0) != 0.0


def test_adamw_is_fused_on_plain_tensors_and_foreach_on_sharded_ones_and_npu():
    from trainers.runtime.device import DevicePlan

    cpu, npu = DevicePlan("cpu", "gloo", False, False), DevicePlan("npu", "hccl", True, True)
    assert cpu.optimizer_kernel(sharded=False) == {"fused": True}
    assert cpu.optimizer_kernel(sharded=True) == {"foreach": True}
    assert npu.optimizer_kernel(sharded=False) == {"foreach": True}
    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.ones(3)
    torch.optim.AdamW([weight], lr=0.1, **cpu.optimizer_kernel(sharded=False)).step()  # this torch has it on CPU
    assert float(weight.detach()[0]) < 1.0
