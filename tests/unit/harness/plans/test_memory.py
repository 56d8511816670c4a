"""Memory per device: counted on the real modules; a module left out of the count is caught."""
from __future__ import annotations

import json

import pytest
from plan_helpers import write_plan

from harness.plans import megatron_probe, memory
from harness.plans.plan_format import load_plan
from harness.plans.verdict import evaluate

torch = pytest.importorskip("torch")
models = pytest.importorskip("trainers.models")


@pytest.fixture
def tiny_moe(tmp_path):
    """A models dir holding the tiny zoo's MoE config as a 'published' model, and a plan on it."""
    config = models.default_config("moe")
    config["model_type"] = "qwen3_5_moe_text"
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-moe.json").write_text(json.dumps({"hf_config": config}))
    path = write_plan(tmp_path, plan__model="tiny-moe", parallel__tp=2, parallel__pp=2, parallel__ep=2,
                      cluster__nodes=1, cluster__devices_per_node=8, rollout__tp=2)
    return load_plan(path, models_dir=tmp_path / "models")


def test_meta_model_holds_every_real_parameter(tiny_moe):
    meta = memory.build_meta_model(tiny_moe.model)
    real = models.build_model("moe")
    assert all(p.is_meta for p in meta.parameters())
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in real.parameters())


def test_megatron_split_equals_megatron_cores_own_rank_on_every_stage(tiny_moe):
    """Qwen3.5-MoE (Gated DeltaNet, gated attention, experts): the split's count is megatron-core's."""
    pytest.importorskip("megatron.core")
    model = memory.build_meta_model(tiny_moe.model)
    per_stage = memory.megatron_per_stage(model, tiny_moe, [2, 2])
    assert memory.check_conservation(tiny_moe, per_stage, model.config).startswith("per-stage count equal")
    assert all(stage["expert"] > 0 and stage["dense"] > 0 for stage in per_stage)


def _broken_counts(tiny_moe, **broken):
    pytest.importorskip("megatron.core")
    model = memory.build_meta_model(tiny_moe.model)
    return model, memory.megatron_per_stage(model, tiny_moe, [2, 2], **broken)


def test_dropping_the_experts_from_the_count_is_caught(tiny_moe):
    def without_experts(name, tp, ep, etp):
        if ".experts." in name:
            return "expert", 10 ** 12  # a count that leaves the routed experts out
        return memory.megatron_split(name, tp, ep, etp)

    model, per_stage = _broken_counts(tiny_moe, split=without_experts)
    with pytest.raises(AssertionError, match="megatron-core's own modules of one rank hold"):
        memory.check_conservation(tiny_moe, per_stage, model.config)


def test_a_divisor_applied_twice_is_caught(tiny_moe):
    def twice(name, tp, ep, etp):
        kind, divisor = memory.megatron_split(name, tp, ep, etp)
        return kind, divisor * tp if kind == "dense" else divisor  # the tensor split applied twice

    model, per_stage = _broken_counts(tiny_moe, split=twice)
    with pytest.raises(AssertionError, match="by pipeline stage"):
        memory.check_conservation(tiny_moe, per_stage, model.config)


def test_a_layer_counted_on_the_wrong_stage_is_caught(tiny_moe, monkeypatch):
    """Every parameter still counted once, so the split's own divisors would rebuild the total; the
    stages differ from megatron-core's."""
    real_place = memory.place

    def misplaced(name, stages):
        return 1 if ".layers.1." in name else real_place(name, stages)  # layer 1 belongs to stage 0

    monkeypatch.setattr(memory, "place", misplaced)
    model, per_stage = _broken_counts(tiny_moe)
    with pytest.raises(AssertionError, match="by pipeline stage"):
        memory.check_conservation(tiny_moe, per_stage, model.config)


def test_fsdp_shards_are_a_world_fraction_of_the_model(tiny_moe, tmp_path):
    plan = load_plan(write_plan(tmp_path, name="fsdp.toml", plan__model="tiny-moe", plan__backend="fsdp",
                                parallel__tp=1, parallel__pp=1, parallel__ep=1, cluster__nodes=1,
                                cluster__devices_per_node=4, rollout__tp=2), models_dir=tmp_path / "models")
    total = sum(p.numel() for p in memory.build_meta_model(plan.model).parameters())
    estimate = memory.fsdp_estimate(plan)
    params = sum(1 for _ in memory.build_meta_model(plan.model).parameters())
    assert total / 4 <= estimate.params <= total / 4 + params * 64  # rank 0's shards, with dim-0 padding
    assert estimate.bytes_by_part["grads"] == 0  # param_offload: on the host


@pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")
def test_memory_rule_fails_a_plan_that_does_not_fit(tmp_path):
    fits = evaluate(load_plan(write_plan(tmp_path)))
    assert fits.verdict == "would start" and 10 < fits.memory_gib["total"] < 96
    small = evaluate(load_plan(write_plan(tmp_path, name="small.toml", cluster__memory_gib=24)))
    assert small.verdict == "would not start"
    assert any(f.field == "cluster.memory_gib" and "exceeds 24 GiB" in f.message for f in small.findings)


def test_activation_estimate_drops_when_a_module_is_left_out(tiny_moe):
    from harness.plans import activations

    ids = torch.randint(3, tiny_moe.model.get("vocab_size"), (2, 64))
    measured = activations.measure_saved(models.build_model("moe"), ids)
    per_token = sum(activations.layer_widths(tiny_moe.model, k) for k in tiny_moe.model.layer_types)
    estimate = 2 * 64 * (per_token + tiny_moe.model.get("vocab_size")) * 4
    # the torch fallbacks on CPU save more than the fused kernels the estimate models (README: about 1.8-2.2x)
    assert 1.0 < measured / estimate < 2.5
    without_mlp = estimate - 2 * 64 * 4 * len(tiny_moe.model.layer_types) * activations.mlp_width(tiny_moe.model)
    assert measured / without_mlp > 2.5  # leaving the MoE block out falls outside the stated band


def test_a_count_that_does_not_add_up_fails_the_plan_memory_finding(tiny_moe, monkeypatch):
    """Through the verdict: a misplaced layer makes the memory finding fail (never unchecked, never a fit)."""
    pytest.importorskip("megatron.core")
    from harness.plans import verdict

    real_place = memory.place
    monkeypatch.setattr(memory, "place", lambda name, stages: 1 if ".layers.1." in name else real_place(name, stages))
    finding, gib = verdict.memory_finding(tiny_moe)
    assert finding.status == verdict.FAIL and gib == {}
    assert "does not add up" in finding.message and "by pipeline stage" in finding.message
