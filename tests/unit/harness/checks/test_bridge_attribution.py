"""Each bridge-parity verdict names the bridge that produced it; one named for Megatron-Bridge that the
project mapping produced fails, and a failed import of Megatron-Bridge names the line of its code that raised."""
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
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: "0.6.2")
    monkeypatch.setattr(megatron_bridge, "verdicts", lambda *a, **k: [bridge_parity.parity_verdict(
        "megatron-bridge/text-hybrid-tp1/logprobs", PROJECT, None)])  # a wiring that credits Megatron-Bridge wrongly
    monkeypatch.setattr(bridge_parity, "JOBS", {"tp1": (1, 1, "text-hybrid"), "megatron-bridge-tp1": (1, 1, "")})
    monkeypatch.setattr(bridge_parity, "_skip_reason", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path),
                               jobs=("tp1", "megatron-bridge-tp1"))
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["text-hybrid-tp1"].status == Status.PASS
    assert verdicts["megatron-bridge/text-hybrid-tp1/logprobs"].status == Status.FAIL and result.status == Status.FAIL


def test_an_import_error_names_the_line_of_megatron_bridges_code_that_raised():
    path = "/site-packages/megatron/bridge/peft/lora_layers.py"
    linecache.cache[path] = (1, None, ["import transformer_engine_absent_here.pytorch as te\n"], path)
    try:
        exec(compile("import transformer_engine_absent_here.pytorch as te\n", path, "exec"), {})
    except ModuleNotFoundError as exc:
        where = megatron_bridge.raising_line(exc)
    assert where == ("megatron/bridge/peft/lora_layers.py line 1: "
                     "`import transformer_engine_absent_here.pytorch as te`")
