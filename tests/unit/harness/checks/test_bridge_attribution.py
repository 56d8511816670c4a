"""Each bridge-parity verdict names the bridge that produced it; one named for Megatron-Bridge that the
project mapping produced fails, and an unimportable Megatron-Bridge bridge is a skip with its own error."""
from __future__ import annotations

import linecache

from harness.checks import CheckOptions, bridge_parity
from harness.checks.bridge_parity import megatron_bridge
from harness.results.records import Status, Verdict

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


def test_the_check_passes_every_verdict_through_the_guard(tmp_path, monkeypatch):
    from harness.checks.support import forked_ranks

    monkeypatch.setattr(forked_ranks, "preload", lambda *names: None)
    monkeypatch.setattr(bridge_parity, "_run_job", lambda job, *a: ({"text-hybrid": PROJECT}, "forked"))
    monkeypatch.setattr(megatron_bridge, "probe", lambda: {"text-hybrid": {"bridge": "megatron-bridge 0.6.2"}})
    monkeypatch.setattr(megatron_bridge, "verdicts", lambda found: [bridge_parity.parity_verdict(
        "megatron-bridge/text-hybrid", PROJECT, None)])  # a wiring that credits Megatron-Bridge wrongly
    monkeypatch.setattr(bridge_parity, "JOBS", {"tp1": (1, 1, "text-hybrid")})
    monkeypatch.setattr(bridge_parity, "_skip_reason", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path), jobs=("tp1",))
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["text-hybrid-tp1"].status == Status.PASS
    assert verdicts["megatron-bridge/text-hybrid"].status == Status.FAIL and result.status == Status.FAIL


def test_an_unimportable_bridge_is_skipped_with_the_line_of_its_code_that_raised(monkeypatch):
    path = "/site-packages/megatron/bridge/peft/lora_layers.py"
    linecache.cache[path] = (1, None, ["import transformer_engine_absent_here.pytorch as te\n"], path)
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: "0.6.2")

    def import_module(name):
        exec(compile("import transformer_engine_absent_here.pytorch as te\n", path, "exec"), {})

    monkeypatch.setattr(megatron_bridge.importlib, "import_module", import_module)
    found = megatron_bridge.probe()
    assert set(found) == {"text-hybrid", "moe-hybrid", "vl"}
    text = found["text-hybrid"]
    assert text["bridge"] == "megatron-bridge 0.6.2 (Qwen35Bridge)" and not text["importable"]
    assert text["where"] == ("megatron/bridge/peft/lora_layers.py line 1: "
                             "`import transformer_engine_absent_here.pytorch as te`")
    verdict, *_ = megatron_bridge.verdicts(found)
    assert verdict.name == "megatron-bridge/text-hybrid" and verdict.status == Status.SKIP
    assert "cannot be imported on this runner: ModuleNotFoundError" in verdict.message
    assert verdict.metrics["bridge"].startswith("megatron-bridge")
    assert megatron_bridge.attributed(verdict) is verdict
    assert megatron_bridge.summary(found) == ("; Megatron-Bridge's Qwen3.5 bridges cannot be imported on this runner: "
                                              f"{text['error']} at {text['where']}")


def test_without_megatron_bridge_there_is_no_verdict_for_it(monkeypatch):
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: None)
    assert megatron_bridge.probe() == {} and megatron_bridge.verdicts({}) == [] and megatron_bridge.summary({}) == ""
