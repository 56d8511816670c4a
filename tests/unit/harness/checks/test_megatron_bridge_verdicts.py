"""Megatron-Bridge's own verdicts in bridge-parity: each fails on the broken measurement it exists for, the TE
import stand-in stays inside the module it is served to, the layout correspondence, and max_ranks."""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest

from harness.checks import bridge_parity
from harness.checks.bridge_parity import megatron_bridge, te_import, te_layout
from harness.errors import InputError
from harness.results.records import Status

IMPORTED = {"error": None, "transformer_engine_stand_in": True,
            "stand_in_served": ["megatron.bridge.peft.lora_layers: import transformer_engine.pytorch"]}


def measured(cls: str) -> dict:
    return {"bridge": f"megatron-bridge 0.6.2 ({cls})", "bridge_class": cls, "expected_class": cls, "tp": 1, "ep": 1,
            "overrides": {"transformer_impl": {"from": "'transformer_engine'", "to": "'local'", "why": "TE"}},
            "roundtrip_compared": 56, "roundtrip_mismatched": [], "roundtrip_extra": [],
            "max_abs_logprob_error": 9.5e-7, "finite": True,
            "max_rel_grad_error": 2e-4, "worst_grad": "decoder.layers.1.self_attention.out_norm.weight",
            "grads_compared": 41, "project_compared": 41, "project_mismatched": [], "project_unmatched": [],
            "project_max_abs_diff": 0.0}


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
                          for aspect in megatron_bridge.ASPECTS} | {"megatron-bridge/vl"}
    for name, verdict in found.items():
        assert megatron_bridge.attributed(verdict) is verdict
        if name == "megatron-bridge/vl":
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
                              "project_max_abs_diff": 1.5}}


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


def test_an_import_that_still_fails_skips_with_the_line_that_raised():
    data = {"import": {"error": "ModuleNotFoundError: No module named 'transformer_engine'",
                       "where": "megatron/bridge/peft/lora_layers.py line 20: "
                                "`import transformer_engine.pytorch as te`"}}
    found = run_verdicts(data)
    assert set(found) == {"megatron-bridge/text-hybrid", "megatron-bridge/moe-hybrid", "megatron-bridge/vl"}
    assert all(v.status == Status.SKIP and "lora_layers.py line 20" in v.message for v in found.values())
    assert run_verdicts(data, "megatron-bridge-tp2") == {}  # said once, not once per job


def test_without_megatron_bridge_there_is_no_verdict_for_it():
    assert megatron_bridge.verdicts("megatron-bridge-tp1", results(), None, 1e-4, 1e-2) == []
    assert megatron_bridge.summary([]) == ""


def test_a_verdict_named_for_megatron_bridge_from_the_project_mapping_fails_the_guard():
    data = copy.deepcopy(results())
    data["text-hybrid"]["bridge"] = "project-mapping"  # a wiring that runs the project mapping under its name
    found = [megatron_bridge.attributed(v) for v in run_verdicts(data).values()]
    text = [v for v in found if v.name.startswith("megatron-bridge/text-hybrid-tp1/")]
    assert text and all(v.status == Status.FAIL and "produced by project-mapping" in v.message for v in text)


def test_the_stand_in_is_served_only_to_its_module(tmp_path, monkeypatch):
    package = tmp_path / "standin_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "uses_te.py").write_text(textwrap.dedent("""\
        import transformer_engine.pytorch as te

        def annotated() -> tuple[te.ops.Sequential, te.Linear]:
            return te
        """))
    (package / "guards_te.py").write_text(textwrap.dedent("""\
        try:
            import transformer_engine  # noqa: F401
            HAVE_TE = True
        except ImportError:
            HAVE_TE = False
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    scope = te_import._Scope({"standin_probe.uses_te"})
    monkeypatch.setattr(sys, "meta_path", [scope, *sys.meta_path])
    if not te_import.needed():
        pytest.skip("Transformer Engine is installed here")
    import standin_probe.guards_te
    import standin_probe.uses_te

    te = standin_probe.uses_te.annotated()
    assert not isinstance(object(), te.Linear)
    with pytest.raises(RuntimeError, match="import-only stand-in"):
        te.ops.Sequential()
    assert standin_probe.guards_te.HAVE_TE is False  # a guard elsewhere still sees Transformer Engine absent
    assert "transformer_engine" not in sys.modules
    assert scope.served == [("standin_probe.uses_te", "transformer_engine.pytorch")]


def test_project_layout_names_meet_transformer_engines():
    te_names = {"decoder.layers.0.self_attention.in_proj.layer_norm_weight",
                "decoder.layers.3.self_attention.linear_qkv.layer_norm_weight",
                "decoder.layers.0.mlp.linear_fc1.layer_norm_weight", "decoder.layers.1.pre_mlp_layernorm.weight",
                "decoder.layers.0.self_attention.out_norm.weight"}
    assert te_layout.project_name("decoder.layers.0.input_layernorm.weight", te_names) == (
        "decoder.layers.0.self_attention.in_proj.layer_norm_weight", 0.0)
    assert te_layout.project_name("decoder.layers.3.input_layernorm.weight", te_names)[0].endswith("linear_qkv."
                                                                                                   "layer_norm_weight")
    assert te_layout.project_name("decoder.layers.0.pre_mlp_layernorm.weight", te_names)[0].endswith("linear_fc1."
                                                                                                     "layer_norm_weight")
    assert te_layout.project_name("decoder.layers.1.pre_mlp_layernorm.weight", te_names)[0] == (
        "decoder.layers.1.pre_mlp_layernorm.weight")
    assert te_layout.project_name("decoder.layers.0.self_attention.out_norm.weight", te_names)[1] == 1.0
    assert te_layout.project_name("decoder.layers.2.input_layernorm.weight", te_names) == (None, 0.0)


def test_a_two_rank_job_names_its_layout_and_leaves_the_vl_skip_to_the_first():
    data = results()
    data["moe-hybrid"].update(tp=1, ep=2)
    found = run_verdicts({k: v for k, v in data.items() if k != "text-hybrid"}, "megatron-bridge-ep2")
    assert set(found) == {f"megatron-bridge/moe-hybrid-ep2/{a}" for a in megatron_bridge.ASPECTS}
    assert all(v.status == Status.PASS and v.metrics["ep"] == 2 for v in found.values())


def test_max_ranks_keeps_only_the_jobs_that_fit():
    library = ("megatron-bridge-tp1", "megatron-bridge-tp2", "megatron-bridge-ep2")
    assert bridge_parity.default_jobs(1, False) == ("tp1",)
    assert bridge_parity.default_jobs(1, True) == ("tp1", "megatron-bridge-tp1")
    assert bridge_parity.default_jobs(None, False) == ("tp1", "tp2", "ep2")
    assert bridge_parity.default_jobs(2, True) == ("tp1", "tp2", "ep2", *library)


MATRIX = textwrap.dedent("""\
    [matrix]
    name = "t"
    checks = ["bridge-parity"]
    max_ranks = {value}

    [axes]
    transformers = ["5.3.0"]
    torch = ["2.13.0"]
    backend = ["megatron"]
    model = ["text"]
    device = ["cpu"]
    """)


def test_max_ranks_reaches_the_check_command(tmp_path):
    from harness import matrix
    from harness.execution import cell as run

    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(value=1))
    cell = matrix.load(path).cells[0]
    assert cell.max_ranks == 1
    assert run._check_args(cell, run.RunOptions(out_dir=tmp_path))[-2:] == ["--max-ranks", "1"]


@pytest.mark.parametrize("value", ["0", "-2", "true", '"1"', "1.5"])
def test_a_bad_max_ranks_is_one_line_naming_the_key(tmp_path, value):
    from harness import matrix

    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(value=value))
    with pytest.raises(InputError) as info:
        matrix.load(path)
    message = str(info.value)
    assert "matrix.max_ranks" in message and "(line 4)" in message and str(path) in message and "\n" not in message
    assert InputError.exit_code == 2


def test_the_check_command_refuses_a_bad_max_ranks_with_exit_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "check", "bridge-parity", "--backend", "megatron",
                           "--max-ranks", "0", "--work-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("--max-ranks: expected a whole number of ranks, at least 1, "
                                                         "got 0")
