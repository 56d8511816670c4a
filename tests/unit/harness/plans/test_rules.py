"""Each start-up rule fails on a plan made to break it, and names the plan field; an uneven pipeline split is
blamed on the stage sizes that make it."""
from __future__ import annotations

import pytest
from plan_helpers import ROOT_PLANS, write_plan

from harness.plans import megatron_probe, rules
from harness.plans.plan_format import load_plan

needs_mcore = pytest.mark.skipif(megatron_probe.version() is None, reason="megatron-core not installed")


def findings(tmp_path, **changes):
    return rules.check(load_plan(write_plan(tmp_path, **changes)))


def failed(found, field):
    return [f for f in found if f.field == field and f.status == rules.FAIL]


@needs_mcore
def test_seed_plan_passes_every_rule(tmp_path):
    found = findings(tmp_path)
    assert not [f for f in found if f.status != rules.OK], found
    assert any(f.field == "parallel.pp" and "[24, 24]" in f.message for f in found)


@needs_mcore
@pytest.mark.parametrize("changes, field, words", [
    # TP that does not divide the attention heads (and then not the world either)
    ({"parallel__tp": 3, "cluster__devices_per_node": 6}, "parallel.tp", "num_attention_heads (32)"),
    # TP that divides the heads and KV groups but not the GDN key heads (16)
    ({"parallel__tp": 32, "parallel__pp": 1, "parallel__ep": 1}, "parallel.tp", "linear_num_key_heads"),
    # TP that is neither a multiple nor a divisor of the KV groups (27B: 24 heads, 4 groups)
    ({"plan__model": "Qwen3.5-27B", "parallel__tp": 6, "parallel__pp": 1, "parallel__ep": 1,
      "cluster__nodes": 1, "cluster__devices_per_node": 6}, "parallel.tp", "num_query_groups (4)"),
    # EP and ETP that do not divide the experts / the expert FFN
    ({"parallel__ep": 3, "cluster__devices_per_node": 6}, "parallel.ep", "does not divide experts (256)"),
    ({"parallel__etp": 3}, "parallel.etp", "does not divide expert FFN width (1024)"),
    # PP that does not divide the 48 layers
    ({"parallel__pp": 5, "cluster__nodes": 5, "parallel__ep": 2}, "parallel.pp", "divisible"),
    # a world that tp*pp*cp does not divide
    ({"cluster__nodes": 3, "cluster__devices_per_node": 5}, "cluster", "not a multiple of tp*pp*cp"),
    # rollout TP that does not divide the attention heads
    ({"rollout__tp": 3}, "rollout.tp", "does not divide attention heads (32)"),
    # dynamic batch size without packed sequences
    ({"batch__dynamic_bsz": True}, "batch.dynamic_bsz", "needs remove_padding"),
])
def test_rule_fails_on_a_plan_that_breaks_it(tmp_path, changes, field, words):
    found = findings(tmp_path, **changes)
    bad = failed(found, field)
    assert bad and any(words in f.message for f in bad), [f.line() for f in found]


@needs_mcore
def test_context_parallel_with_gdn_follows_the_installed_config(tmp_path):
    from packaging.version import Version

    found = failed(findings(tmp_path, parallel__cp=2), "parallel.cp")
    if Version(megatron_probe.version()) < Version("0.18"):  # 0.16 / 0.17: "does not support context parallel"
        assert found and "context parallel" in found[0].message
    else:  # 0.19.2 splits GDN heads over CP
        assert not found


@needs_mcore
def test_uneven_pipeline_stages_fix_an_indivisible_split(tmp_path):
    found = findings(tmp_path, parallel__pp=5, cluster__nodes=5, parallel__ep=2,
                     parallel__first_stage_layers=12, parallel__last_stage_layers=12)
    assert not failed(found, "parallel.pp")
    assert any(f.field == "parallel.pp" and "[12, 8, 8, 8, 12]" in f.message for f in found)


@needs_mcore
def test_packed_sequences_with_gdn_follow_the_installed_layer(tmp_path):
    refuses, why = megatron_probe.gdn_refuses_packed()
    found = findings(tmp_path, batch__remove_padding=True)
    if refuses:  # megatron-core 0.16 / 0.17
        assert failed(found, "batch.remove_padding") and "packed" in why
    else:
        assert not failed(found, "batch.remove_padding")


@needs_mcore
def test_seed_235b_plan_fails_on_its_pipeline_split():
    found = rules.check(load_plan(ROOT_PLANS / "qwen3-235b-a22b-megatron-async-npu.toml"))
    assert failed(found, "parallel.pp")


def test_without_megatron_core_rules_are_unchecked_not_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(megatron_probe, "version", lambda: None)
    found = findings(tmp_path)
    unchecked = {f.field for f in found if f.status == rules.UNCHECKED}
    assert unchecked >= {"parallel", "parallel.cp", "batch.remove_padding"}
    broken = findings(tmp_path, parallel__tp=3, cluster__devices_per_node=6)
    assert failed(broken, "parallel.tp")  # the divisibility arithmetic still runs


def test_fsdp_plan_with_model_parallel_sizes_fails(tmp_path):
    found = findings(tmp_path, plan__backend="fsdp", plan__model="Qwen3.5-9B")
    assert failed(found, "parallel")


def test_rollout_kv_heads_rule(tmp_path):
    # 27B: 4 KV heads; TP 8 replicates them (8 % 4 == 0), TP 6 can neither split nor replicate them
    ok = findings(tmp_path, plan__backend="fsdp", plan__model="Qwen3.5-27B", parallel__tp=1,
                  parallel__pp=1, parallel__ep=1, rollout__tp=8)
    assert not failed(ok, "rollout.tp")
    bad = findings(tmp_path, plan__backend="fsdp", plan__model="Qwen3.5-27B", parallel__tp=1, parallel__pp=1,
                   parallel__ep=1, rollout__tp=6, cluster__devices_per_node=6)
    assert any("KV heads" in f.message for f in failed(bad, "rollout.tp"))


def _failed(plan_path, field):
    return [f for f in rules.check(load_plan(plan_path)) if f.field == field and f.status == rules.FAIL]


@needs_mcore
@pytest.mark.parametrize("changes, blamed", [
    # stage sizes on a plan without a pipeline: megatron-core refuses them, not tp/pp/cp/ep/etp
    ({"parallel__pp": 1, "parallel__first_stage_layers": 1000, "cluster__nodes": 2}, ["parallel.first_stage_layers"]),
    # 48 - 11 - 10 = 27 layers do not split over 2 middle stages
    ({"parallel__pp": 4, "parallel__first_stage_layers": 11, "parallel__last_stage_layers": 10, "cluster__nodes": 8},
     ["parallel.first_stage_layers", "parallel.last_stage_layers"]),
])
def test_an_uneven_split_is_blamed_on_the_stage_sizes(tmp_path, changes, blamed):
    found = rules.check(load_plan(write_plan(tmp_path, **changes)))
    failed = sorted({f.field for f in found if f.status == rules.FAIL})
    assert failed == blamed, [f.line() for f in found]


@needs_mcore
def test_an_even_uneven_split_passes_and_pp_is_still_blamed_for_itself(tmp_path):
    good = rules.check(load_plan(write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=10,
                                            parallel__last_stage_layers=10, cluster__nodes=8)))
    assert not [f for f in good if f.status == rules.FAIL], [f.line() for f in good]
    assert _failed(write_plan(tmp_path, parallel__pp=5, cluster__nodes=5, parallel__ep=2), "parallel.pp")


def test_without_megatron_core_the_stage_sizes_are_checked_as_arithmetic(tmp_path, monkeypatch):
    monkeypatch.setattr(megatron_probe, "version", lambda: None)
    assert _failed(write_plan(tmp_path, parallel__pp=1, parallel__first_stage_layers=1000, cluster__nodes=2),
                   "parallel.first_stage_layers")
    both = write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=11, parallel__last_stage_layers=10,
                      cluster__nodes=8)
    assert _failed(both, "parallel.first_stage_layers") and _failed(both, "parallel.last_stage_layers")
    even = write_plan(tmp_path, parallel__pp=4, parallel__first_stage_layers=10, parallel__last_stage_layers=10,
                      cluster__nodes=8)
    assert not _failed(even, "parallel.first_stage_layers") and not _failed(even, "parallel.last_stage_layers")


def _installed_vllm(monkeypatch, tmp_path, files: dict[str, str]) -> None:
    """An installed `vllm` whose package folder holds `files` (its spec only: nothing of it is imported)."""
    import importlib.machinery
    import importlib.util

    package = tmp_path / "vllm"
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    spec = importlib.machinery.ModuleSpec("vllm", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "vllm" else real(name, *a))


RULE = """class ModelConfig:
    def verify_with_parallel_config(self, parallel_config):
        if total_num_attention_heads % tensor_parallel_size != 0:
            raise ValueError("heads")
"""


@pytest.mark.parametrize("files, says", [
    ({"config/model.py": RULE}, "read from the installed vLLM's ModelConfig.verify_with_parallel_config"),
    ({"config.py": RULE}, "read from the installed vLLM's"),  # a release before vllm/config/ was a package
    ({"config/model.py": RULE.replace("total_num_attention_heads", "heads")}, "no longer states the heads rule"),
    ({"config/model.py": "class ModelConfig:\n    pass\n"}, "was not found in its source"),
])
def test_the_rollout_rule_is_read_from_vllms_source_without_importing_it(monkeypatch, tmp_path, files, says):
    _installed_vllm(monkeypatch, tmp_path, files)
    assert says in rules._vllm_rule_source()
