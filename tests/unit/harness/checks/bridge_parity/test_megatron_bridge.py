"""Megatron-Bridge's own verdicts in bridge-parity: each fails on the broken measurement it exists for, each names
the bridge that produced it (one named for Megatron-Bridge that the project mapping produced fails), the ones run
on this project's CPU layers are marked emulated and name the stand-ins, a NaN or a non-finite gradient fails,
and a failed import of a pinned Megatron-Bridge is an error naming the line of its code that raised."""
from __future__ import annotations

import copy
import linecache

import pytest

from harness.checks import CheckOptions, bridge_parity
from harness.checks.bridge_parity import megatron_bridge
from harness.results.records import Status, Verdict

IMPORTED = {"error": None, "transformer_engine_stand_in": True,
            "stand_in_served": ["megatron.bridge.peft.lora_layers: import transformer_engine.pytorch"]}


def measured(cls: str) -> dict:
    return {"bridge": f"megatron-bridge 0.6.2 ({cls})", "bridge_class": cls, "expected_class": cls, "tp": 1, "ep": 1,
            "overrides": {"transformer_impl": {"from": "'transformer_engine'", "to": "'local'", "why": "TE"}},
            "roundtrip_compared": 56, "roundtrip_mismatched": [], "roundtrip_extra": [],
            "max_abs_logprob_error": 9.5e-7, "finite": True,
            "max_rel_grad_error": 2e-4, "worst_grad": "decoder.layers.1.self_attention.out_norm.weight",
            "grads_compared": 41, "project_compared": 41, "project_mismatched": [], "project_unmatched": [],
            "project_max_abs_diff": 0.0, "mtp": mtp_measured()}


def mtp_measured(**changed) -> dict:
    """Megatron-Bridge's MTP round trip as recorded (library.mtp_round_trip), with `changed` fields."""
    return {"compared": 80, "mtp_tensors": 15, "unwritten": [], "renamed": [], "differs": [],
            "megatron_mtp_tensors": 12, "unmapped": [], "mtp_block_spec": True, "seconds": 0.2, **changed}


def results() -> dict:
    return {"import": dict(IMPORTED), "text-hybrid": measured("Qwen35Bridge"),
            "moe-hybrid": measured("Qwen35MoEBridge"),
            "vl": {"reason": "its vision tower is built only from Transformer Engine modules (x.py line 507: `...`)"}}


def run_verdicts(data, job="megatron-bridge-tp1"):
    return {v.name: v for v in megatron_bridge.verdicts(job, data, "0.6.2", bridge_parity.LOGPROB_ATOL,
                                                        bridge_parity.GRAD_RTOL)}


def test_measured_agreement_passes_every_verdict_each_naming_its_bridge():
    found = run_verdicts(results())
    assert set(found) == {f"megatron-bridge/{case}-tp1/{aspect}" for case in ("text-hybrid", "moe-hybrid")
                          for aspect in megatron_bridge.ASPECTS} | {"megatron-bridge/vl",
                                                                    "megatron-bridge/vl/mtp-roundtrip"}
    for name, verdict in found.items():
        assert megatron_bridge.attributed(verdict) is verdict
        if name.startswith("megatron-bridge/vl"):
            assert verdict.status == Status.SKIP and "line 507" in verdict.message
            continue
        assert verdict.status == Status.PASS, verdict.message
        cls = "Qwen35MoEBridge" if "moe" in name else "Qwen35Bridge"
        assert verdict.metrics["bridge"] == f"megatron-bridge 0.6.2 ({cls})" and cls in verdict.message
        assert verdict.metrics["transformer_engine_stand_in"] is True


# aspect -> a broken measurement of it
BROKEN = {"roundtrip": {"roundtrip_mismatched": ["model.layers.0.linear_attn.A_log"]},
          "logprobs": {"max_abs_logprob_error": 0.3},
          "grads": {"max_rel_grad_error": 0.5, "worst_grad": "decoder.layers.0.self_attention.A_log"},
          "project-mapping": {"project_mismatched": ["decoder.layers.0.self_attention.A_log"],
                              "project_max_abs_diff": 1.5},
          "mtp-roundtrip": {"mtp": mtp_measured(unwritten=["mtp.pre_fc_norm_embedding.weight"])}}


@pytest.mark.parametrize("aspect", sorted(BROKEN))
def test_each_verdict_fails_on_its_broken_measurement_alone(aspect):
    data = results()
    data["text-hybrid"].update(BROKEN[aspect])
    found = run_verdicts(data)
    failed = {name for name, v in found.items() if v.status == Status.FAIL}
    assert failed == {f"megatron-bridge/text-hybrid-tp1/{aspect}"}, failed


@pytest.mark.parametrize("field, value", [("roundtrip_extra", ["model.extra"]), ("finite", False),
                                          ("project_unmatched", ["decoder.layers.0.input_layernorm.weight"])])
def test_a_dropped_or_extra_tensor_or_nonfinite_output_fails(field, value):
    data = results()
    data["moe-hybrid"][field] = value
    assert [n for n, v in run_verdicts(data).items() if v.status == Status.FAIL] != []


def test_a_model_converted_by_another_bridge_class_fails_every_verdict():
    data = results()
    data["moe-hybrid"]["bridge_class"] = "Qwen3MoEBridge"
    found = run_verdicts(data)
    moe = [v for n, v in found.items() if n.startswith("megatron-bridge/moe-hybrid-tp1/")]
    assert moe and all(v.status == Status.FAIL and "picked Qwen3MoEBridge, not Qwen35MoEBridge" in v.message
                       for v in moe)


def test_an_error_of_the_bridge_fails_and_no_result_fails_with_the_log():
    data = results()
    data["text-hybrid"] = {"error": "AssertionError: Experimental GPT decoder block spec only supports TE"}
    found = run_verdicts(data)
    assert found["megatron-bridge/text-hybrid-tp1"].status == Status.FAIL
    assert "AssertionError" in found["megatron-bridge/text-hybrid-tp1"].message
    empty = megatron_bridge.verdicts("megatron-bridge-ep2", {}, "0.6.2", 1e-4, 1e-2, "Killed")
    assert {v.name for v in empty} == {f"megatron-bridge/moe-hybrid-ep2/{a}" for a in megatron_bridge.ASPECTS}
    assert empty and all(v.status == Status.FAIL and "Killed" in v.message for v in empty)
    assert all(megatron_bridge.attributed(v) is v for v in empty)


IMPORT_FAILED = {"import": {"error": "ModuleNotFoundError: No module named 'transformer_engine'",
                            "where": "megatron/bridge/peft/lora_layers.py line 20: "
                                     "`import transformer_engine.pytorch as te`"}}


def test_a_pinned_megatron_bridge_that_does_not_import_is_an_error_with_the_line_that_raised():
    found = run_verdicts(IMPORT_FAILED)
    assert set(found) == {"megatron-bridge/text-hybrid", "megatron-bridge/moe-hybrid", "megatron-bridge/vl"}
    assert all(v.status == Status.ERROR and "lora_layers.py line 20" in v.message
               and "the row pins it" in v.message for v in found.values())
    assert run_verdicts(IMPORT_FAILED, "megatron-bridge-tp2") == {}  # said once, not once per job


def test_the_check_is_an_error_not_a_pass_when_a_pinned_megatron_bridge_does_not_import(tmp_path, monkeypatch):
    from harness.checks.support import ranks

    monkeypatch.setattr(ranks, "preload", lambda *names: None)
    monkeypatch.setattr(bridge_parity, "_run_job", lambda job, *a: (IMPORT_FAILED, "forked"))
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: "0.6.2")
    monkeypatch.setattr(bridge_parity, "_skip_reason", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path), jobs=("megatron-bridge-tp1",))
    assert result.status == Status.ERROR and "import megatron.bridge" in result.message


def test_conversion_verdicts_are_megatron_bridges_and_the_others_are_emulated_naming_the_stand_ins():
    found = run_verdicts(results())
    for case in ("text-hybrid", "moe-hybrid"):
        for aspect in megatron_bridge.CONVERSION:
            verdict = found[f"megatron-bridge/{case}-tp1/{aspect}"]
            assert not verdict.emulated and verdict.metrics["measures"] == "conversion"
            assert verdict.message.startswith("Megatron-Bridge's conversion, bridge megatron-bridge 0.6.2")
        for aspect in megatron_bridge.RUN_ON_LAYERS:
            verdict = found[f"megatron-bridge/{case}-tp1/{aspect}"]
            assert verdict.emulated and verdict.metrics["measures"] == "run-on-layers", verdict
            for stand_in in ("MaskedGatedDeltaNet", "CpuRMSNorm", "te_layout.py", "megatron_logits",
                             "gradient reduction"):
                assert stand_in in verdict.message, (stand_in, verdict.message)
    assert "6 of 6 conversion verdicts pass; 4 of 4 emulated on this project's CPU layers pass" in \
        megatron_bridge.summary(list(found.values()))
    # on a runner that builds the provider's own layers nothing is emulated, and the project's code is still named
    data = results()
    for case in ("text-hybrid", "moe-hybrid"):
        data[case]["layers"] = "provider"
    own = run_verdicts(data)["megatron-bridge/text-hybrid-tp1/grads"]
    assert not own.emulated and "provider's own layers" in own.message and "megatron_logits" in own.message
    assert megatron_bridge.attributed(own) is own and megatron_bridge.attributed(
        Verdict(own.name, own.status, own.message, metrics={}, emulated=True)).emulated


@pytest.mark.parametrize("field, value", [("max_rel_grad_error", float("nan")),
                                          ("max_abs_logprob_error", float("nan")),
                                          ("project_max_abs_diff", float("nan")),
                                          ("nonfinite_grads", ["decoder.layers.0.self_attention.A_log"])])
def test_a_nan_or_a_nonfinite_gradient_fails_its_verdict(field, value):
    data = results()
    data["text-hybrid"][field] = value
    if field == "project_max_abs_diff":
        data["text-hybrid"]["project_mismatched"] = ["decoder.layers.0.self_attention.A_log"]
    failed = {name for name, v in run_verdicts(data).items() if v.status == Status.FAIL}
    assert len(failed) == 1 and failed <= {f"megatron-bridge/text-hybrid-tp1/{a}" for a in megatron_bridge.ASPECTS}


def test_without_megatron_bridge_there_is_no_verdict_for_it():
    assert megatron_bridge.verdicts("megatron-bridge-tp1", results(), None, 1e-4, 1e-2) == []
    assert megatron_bridge.summary([]) == ""


def test_a_verdict_named_for_megatron_bridge_from_the_project_mapping_fails_the_guard():
    data = copy.deepcopy(results())
    data["text-hybrid"]["bridge"] = "project-mapping"  # a wiring that runs the project mapping under its name
    found = [megatron_bridge.attributed(v) for v in run_verdicts(data).values()]
    text = [v for v in found if v.name.startswith("megatron-bridge/text-hybrid-tp1/")]
    assert text and all(v.status == Status.FAIL and "produced by project-mapping" in v.message for v in text)


def test_a_two_rank_job_names_its_layout_and_leaves_the_vl_skip_to_the_first():
    data = results()
    data["moe-hybrid"].update(tp=1, ep=2)
    found = run_verdicts({k: v for k, v in data.items() if k != "text-hybrid"}, "megatron-bridge-ep2")
    assert set(found) == {f"megatron-bridge/moe-hybrid-ep2/{a}" for a in megatron_bridge.ASPECTS}
    assert all(v.status == Status.PASS and v.metrics["ep"] == 2 for v in found.values())


PROJECT = {"tp": 1, "ep": 1, "bridge": "project-mapping", "max_abs_logprob_error": 1e-6, "max_rel_grad_error": 1e-4,
           "worst_grad": "lm_head.weight", "finite": True, "roundtrip_exact": True, "roundtrip_mismatched": []}


def test_a_verdict_named_for_megatron_bridge_from_the_project_mapping_fails():
    borrowed = bridge_parity.parity_verdict("megatron-bridge/text-hybrid", PROJECT, None)
    assert borrowed.status == Status.PASS and borrowed.message.startswith("bridge project-mapping:")
    checked = megatron_bridge.attributed(borrowed)
    assert checked.status == Status.FAIL and "produced by project-mapping" in checked.message
    own = Verdict("megatron-bridge/text-hybrid", Status.PASS, "ok",
                  metrics={"bridge": "megatron-bridge 0.6.2 (Qwen35Bridge)"})
    assert megatron_bridge.attributed(own) is own
    mapping = bridge_parity.parity_verdict("text-hybrid-tp1", PROJECT, None)
    assert megatron_bridge.attributed(mapping) is mapping  # the project mapping's own verdicts stand


def test_an_import_error_names_the_line_of_megatron_bridges_code_that_raised():
    path = "/site-packages/megatron/bridge/peft/lora_layers.py"
    linecache.cache[path] = (1, None, ["import transformer_engine_absent_here.pytorch as te\n"], path)
    try:
        exec(compile("import transformer_engine_absent_here.pytorch as te\n", path, "exec"), {})
    except ModuleNotFoundError as exc:
        where = megatron_bridge.raising_line(exc)
    assert where == ("megatron/bridge/peft/lora_layers.py line 1: "
                     "`import transformer_engine_absent_here.pytorch as te`")


# the MTP round trip broken as Megatron-Bridge's export could break it -> what its verdict must name
MTP_BROKEN = {
    "unwritten": (mtp_measured(unwritten=["mtp.pre_fc_norm_embedding.weight"]),
                  ("unwritten ['mtp.pre_fc_norm_embedding.weight']",)),
    "renamed": (mtp_measured(unwritten=["mtp.norm.weight"], renamed=["mtp.final_layernorm.weight"]),
                ("unwritten ['mtp.norm.weight']", "renamed ['mtp.final_layernorm.weight']")),
    "wrong prefix": (mtp_measured(unwritten=["mtp.fc.weight"], renamed=["model.language_model.mtp.fc.weight"]),
                     ("renamed ['model.language_model.mtp.fc.weight']",)),
    "differs": (mtp_measured(differs=["mtp.layers.0.mlp.experts.0.up_proj.weight"]),
                ("differs ['mtp.layers.0.mlp.experts.0.up_proj.weight']",)),
    "no MTP tensor": (mtp_measured(mtp_tensors=0), ("held no MTP tensor",)),
    "refused": ({"error": "KeyError: 'mtp.layers.0.eh_proj.weight' (raised at megatron/bridge/x.py line 9: `...`)"},
                ("KeyError", "x.py line 9")),
}


@pytest.mark.parametrize("kind", sorted(MTP_BROKEN))
def test_an_mtp_tensor_unwritten_renamed_or_changed_by_megatron_bridges_export_fails_naming_it(kind):
    data = results()
    data["moe-hybrid"]["mtp"], named = MTP_BROKEN[kind]
    found = run_verdicts(data)
    failed = {name: v for name, v in found.items() if v.status == Status.FAIL}
    assert set(failed) == {"megatron-bridge/moe-hybrid-tp1/mtp-roundtrip"}, set(failed)
    verdict = failed["megatron-bridge/moe-hybrid-tp1/mtp-roundtrip"]
    assert verdict.message.startswith("Megatron-Bridge's conversion, bridge megatron-bridge 0.6.2 (Qwen35MoEBridge)")
    for text in named:
        assert text in verdict.message, (text, verdict.message)
    assert megatron_bridge.attributed(verdict) is verdict and not verdict.emulated


# as Megatron-Bridge 0.6.2 answers a MoE MTP layer whose experts are SequentialMLP (moe_grouped_gemm off on CPU)
UNMAPPED = [f"mtp.layers.0.mtp_model_layer.mlp.experts.local_experts.{e}.linear_fc1.weight" for e in range(2)]
REFUSED = {"error": "AttributeError: 'NoneType' object has no attribute 'megatron_module' (raised at "
                    "megatron/bridge/models/conversion/model_bridge.py line 1100: `if task.megatron_module is None:`)",
           "unmapped": UNMAPPED}


@pytest.mark.parametrize("recorded", [REFUSED, mtp_measured(unwritten=["mtp.layers.0.mlp.experts.0.gate_proj.weight"],
                                                            unmapped=UNMAPPED)], ids=["load-raises", "skipped"])
def test_mtp_parameters_megatron_bridge_cannot_map_are_named_with_the_layout_that_lacks_them(recorded):
    data = results()
    data["moe-hybrid"]["mtp"] = recorded
    verdict = run_verdicts(data)["megatron-bridge/moe-hybrid-tp1/mtp-roundtrip"]
    assert verdict.status == Status.FAIL and verdict.metrics["unmapped"] == UNMAPPED
    assert "no entry for 2 of the model's Megatron MTP parameters" in verdict.message
    assert UNMAPPED[0] in verdict.message and "SequentialMLP" in verdict.message and "grouped-GEMM" in verdict.message
    if "error" in recorded:
        assert "model_bridge.py line 1100" in verdict.message


def test_the_mtp_verdict_names_the_cpu_mtp_block_and_fails_without_a_record_or_with_another_bridge_class():
    found = run_verdicts(results())
    verdict = found["megatron-bridge/text-hybrid-tp1/mtp-roundtrip"]
    assert verdict.status == Status.PASS and "15 of them MTP" in verdict.message
    assert "te_layout.mtp_block_spec" in verdict.message and verdict.metrics["mtp"] is True
    data = results()
    data["text-hybrid"]["mtp"]["mtp_block_spec"] = False  # a runner whose provider builds its own MTP block
    own = run_verdicts(data)["megatron-bridge/text-hybrid-tp1/mtp-roundtrip"]
    assert own.status == Status.PASS and "te_layout" not in own.message
    del data["text-hybrid"]["mtp"]
    missing = run_verdicts(data)["megatron-bridge/text-hybrid-tp1/mtp-roundtrip"]
    assert missing.status == Status.FAIL and "no MTP round trip was recorded" in missing.message
    data = results()
    data["text-hybrid"]["bridge_class"] = "Qwen3NextBridge"
    wrong = run_verdicts(data)["megatron-bridge/text-hybrid-tp1/mtp-roundtrip"]
    assert wrong.status == Status.FAIL and "picked Qwen3NextBridge" in wrong.message


def test_the_vl_bridges_mtp_round_trip_is_a_skip_naming_why_on_the_first_job_only():
    found = run_verdicts(results())
    vl = found["megatron-bridge/vl/mtp-roundtrip"]
    assert vl.status == Status.SKIP and "#5252" in vl.message and "line 507" in vl.message
    assert vl.metrics["bridge"] == "megatron-bridge 0.6.2 (Qwen35VLBridge)"
    assert "megatron-bridge/vl/mtp-roundtrip" not in run_verdicts(results(), "megatron-bridge-tp2")
