"""gate-precision's verdicts from measurements written out here (no torch): a gate rounded to bf16 as stored or in
the forward is affected upstream and a failure for the trainer, naming it; a run that measured nothing never
passes."""
from __future__ import annotations

from harness.checks.gate_precision import verdicts
from harness.results.records import Status, Verdict

GATES = [f"model.layers.{i}.linear_attn.{g}" for i in range(3) for g in ("A_log", "dt_bias")]
OTHER = "model.layers.0.linear_attn.in_proj_qkv.weight"
DRIFT = {"max": 3e-3, "mean": 8e-4}


def _run(forward: str = "float32", stored: str = "float32", units=("<root>", "model.layers.0"), **overrides):
    run = {"units": list(units), "drift": DRIFT,
           "forward": {**dict.fromkeys(GATES, forward), OTHER: "bfloat16"},
           "stored": {**dict.fromkeys(GATES, stored), OTHER: "float32"}}
    for name, dtype in overrides.items():
        run["forward"][name.replace("__", ".")] = dtype
    return run


def _models(upstream, trainer, load=None):
    load = load or {"declared": {"_keep_in_fp32_modules": [], "_keep_in_fp32_modules_strict": []},
                    "fp32_after_bf16_load": [], "gates_after_bf16_load": dict.fromkeys(GATES, "bfloat16")}
    return {"text": {"upstream": upstream, "trainer": trainer, "load": load, "cast": {}}}


def _by_name(found: list[Verdict]) -> dict[str, Verdict]:
    return {v.name: v for v in found}


def test_float32_gates_pass_and_bf16_gates_are_affected_upstream():
    found = _by_name(verdicts.sharded_verdicts(_models(_run("bfloat16"), _run()), "the policy"))
    assert found["upstream"].status is Status.AFFECTED
    assert "bfloat16 in the forward: model.layers.*.linear_attn.A_log" in found["upstream"].message
    assert found["trainer"].status is Status.PASS
    assert found["trainer"].metrics["text"]["fp32_in_forward"] == ["model.layers.*.linear_attn.A_log",
                                                                   "model.layers.*.linear_attn.dt_bias"]
    assert "max 3.00e-03, mean 8.00e-04" in found["trainer"].message


def test_the_trainer_fails_on_a_gate_rounded_in_the_forward_or_stored_in_bf16():
    forward = _by_name(verdicts.sharded_verdicts(_models(_run("bfloat16"), _run("bfloat16")), "p"))["trainer"]
    assert forward.status is Status.FAIL and "bfloat16 in the forward" in forward.message
    # cast to bf16 before sharding: an fp32 unit gathers it as float32, but the value was rounded and the
    # optimizer steps on a bf16 parameter
    stored = _by_name(verdicts.sharded_verdicts(_models(_run(), _run(stored="bfloat16")), "p"))["trainer"]
    assert stored.status is Status.FAIL and "stored as bfloat16: model.layers.*.linear_attn.A_log" in stored.message
    one = _run(**{"model__layers__1__linear_attn__dt_bias": "bfloat16"})
    single = _by_name(verdicts.sharded_verdicts(_models(_run(), one), "p"))["trainer"]
    assert single.status is Status.FAIL and "model.layers.*.linear_attn.dt_bias" in single.message
    assert "A_log" not in single.message.split("in the forward:")[1].split(";")[0]


def test_nothing_measured_is_never_a_pass():
    no_units = _run(units=())
    assert verdicts.side_status("text", no_units, "upstream")[0] is Status.ERROR  # this check's own sharding
    assert verdicts.side_status("text", no_units, "trainer")[0] is Status.FAIL  # the trainer's
    unseen = _run()
    del unseen["forward"][GATES[0]]
    status, message = verdicts.side_status("text", unseen, "trainer")
    assert status is Status.ERROR and "never seen unsharded" in message
    no_gates = {"units": ["<root>"], "drift": DRIFT, "forward": {OTHER: "float32"}, "stored": {OTHER: "float32"}}
    assert verdicts.side_status("text", no_gates, "trainer")[0] is Status.ERROR


def test_the_worst_model_decides_a_side():
    models = {"text": _models(_run(), _run())["text"], "moe": _models(_run(), _run("bfloat16"))["text"]}
    trainer = _by_name(verdicts.sharded_verdicts(models, "p"))["trainer"]
    assert trainer.status is Status.FAIL and trainer.message.count("moe:") == 1


def test_load_verdict_reads_what_transformers_kept():
    affected = verdicts.load_verdict(_models(_run(), _run()))
    assert affected.status is Status.AFFECTED and "loaded as bfloat16" in affected.message
    assert "_keep_in_fp32_modules=[]" in affected.message
    kept = {"declared": {"_keep_in_fp32_modules_strict": ["A_log", "dt_bias"]},
            "fp32_after_bf16_load": GATES, "gates_after_bf16_load": dict.fromkeys(GATES, "float32")}
    passed = verdicts.load_verdict(_models(_run(), _run(), kept))
    assert passed.status is Status.PASS
    assert passed.metrics["text"]["fp32_after_bf16_load"] == ["model.layers.*.linear_attn.A_log",
                                                              "model.layers.*.linear_attn.dt_bias"]
    empty = {**kept, "gates_after_bf16_load": {}}
    assert verdicts.load_verdict(_models(_run(), _run(), empty)).status is Status.ERROR


def test_overall_fails_on_the_trainer_and_reports_upstream_findings():
    def v(name, status):
        return Verdict(name, status)

    assert verdicts.overall([v("upstream", Status.AFFECTED), v("trainer", Status.FAIL)]) is Status.FAIL
    assert verdicts.overall([v("upstream", Status.AFFECTED), v("trainer", Status.PASS)]) is Status.AFFECTED
    assert verdicts.overall([v("upstream", Status.PASS), v("trainer", Status.PASS),
                             v("upstream/load", Status.AFFECTED)]) is Status.AFFECTED
    assert verdicts.overall([v("upstream", Status.ERROR), v("trainer", Status.PASS)]) is Status.ERROR
    assert verdicts.overall([v("upstream", Status.PASS), v("trainer", Status.PASS)]) is Status.PASS


def test_pattern_folds_layer_numbers():
    assert verdicts.pattern(GATES) == ["model.layers.*.linear_attn.A_log", "model.layers.*.linear_attn.dt_bias"]


def test_verl_side_rounding_is_a_finding_and_a_broken_wrapping_a_failure():
    assert verdicts.side_status("text", _run("bfloat16"), "verl")[0] is Status.AFFECTED
    assert verdicts.side_status("text", _run(units=()), "verl")[0] is Status.FAIL
    assert verdicts.side_status("text", {"raised": "AssertionError: x"}, "verl")[0] is Status.FAIL
    # the same breakage in this check's own plain sharding is the harness's problem, not a finding
    assert verdicts.side_status("text", {"raised": "AssertionError: x"}, "upstream")[0] is Status.ERROR
    assert verdicts.run_metrics({"raised": "AssertionError: x"}) == {"raised": "AssertionError: x"}
