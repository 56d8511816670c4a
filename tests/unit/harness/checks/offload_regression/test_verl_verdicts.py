"""offload-regression's verl verdicts from what the ranks and the emulation saw: stand-in records, no verl needed
(the verl functions a verdict records are stand-ins too; the registry's guard is tested in support/test_verl.py)."""
from __future__ import annotations

from harness.checks.offload_regression import verl_verdicts as vv
from harness.results.records import Status


def apply_fsdp2():  # a stand-in for what a verdict records it ran
    pass


RAN = [apply_fsdp2]
POS_EMBED_SITE = {"key": "created in fast_pos_embed_interpolate", "modules": ["Qwen3_5VisionModel (model.visual)"],
                  "calls": ["embedding"], "where": ["modeling_qwen3_5.py:fast_pos_embed_interpolate:1208"],
                  "count": 1, "shape": [16]}
ROTARY_SITE = {"key": "buffer model.visual.rotary_pos_emb.inv_freq",
               "modules": ["Qwen3_5VisionRotaryEmbedding (model.visual.rotary_pos_emb)"], "calls": ["mul"],
               "where": ["modeling_qwen3_5.py:forward:92"], "count": 1, "shape": [4]}


def _emulated(sites=(), method_calls=0, verl_method=True, raised=False, same_loss=True):
    return {"units": ["<root>"], "device_buffers": [], "raised": raised, "error_class": "RuntimeError",
            "error_site": "x.py:f:1", "loss": 1.0, "reference_loss": 1.0 if same_loss else 2.0, "same_loss": same_loss,
            "sites": {s["key"]: s for s in sites},
            "pos_embed": {"vision": True, "method": "verl.models.transformers.qwen3_5.fast_pos_embed_interpolate",
                          "method_calls": method_calls, "verl_method": verl_method, "index_off_weight_device": False}}


def _by_name(verdicts):
    return {v.name: v for v in verdicts}


def test_a_release_that_never_calls_the_patched_method_says_the_fix_is_not_needed():
    verdicts = _by_name(vv.emulation_verdicts("qwen3_5", _emulated(method_calls=0), "", RAN))
    pos = verdicts["verl:qwen3_5/pos-embed"]
    assert pos.status is Status.PASS and pos.emulated
    assert "patch target not called: the fix is not needed on this release" in pos.message
    said = pos.message.split("]", 1)[1].split("; outside verl's declared range")[0]
    assert "because" not in said and "verl's" not in said
    assert verdicts["verl:qwen3_5/step"].status is Status.PASS


def test_the_pos_embed_site_fails_its_verdict_and_other_sites_get_their_own():
    verdicts = _by_name(vv.emulation_verdicts("qwen3_5_moe", _emulated([POS_EMBED_SITE, ROTARY_SITE], 1, False),
                                              "", RAN))
    pos = verdicts["verl:qwen3_5_moe/pos-embed"]
    assert pos.status is Status.FAIL and "fast_pos_embed_interpolate:1208" in pos.message
    rotary = verdicts["verl:qwen3_5_moe/VisionRotaryEmbedding<inv_freq"]
    assert rotary.status is Status.FAIL and rotary.emulated and "met device compute from the host" in rotary.message
    step = verdicts["verl:qwen3_5_moe/step"]  # on an accelerator the step fails at the first site
    assert step.status is Status.FAIL and "2 host tensors" in step.message


def test_verls_fix_that_ran_passes_and_says_it_was_verls():
    pos = _by_name(vv.emulation_verdicts("qwen3_5", _emulated(method_calls=1), "", RAN))["verl:qwen3_5/pos-embed"]
    assert pos.status is Status.PASS and "called fast_pos_embed_interpolate 1 times, verl's" in pos.message


def test_a_text_model_has_no_pos_embed_verdict_and_a_raise_fails_its_step():
    verdicts = _by_name(vv.emulation_verdicts("qwen3_5_text", _emulated(raised=True), "/strict-emulation", RAN))
    assert set(verdicts) == {"verl:qwen3_5_text/step/strict-emulation"}
    assert verdicts["verl:qwen3_5_text/step/strict-emulation"].status is Status.FAIL


def _real(**changes):
    real = {"units": ["<root>", "model.visual.pos_embed"], "pin_memory": False, "param_dtype": "float32",
            "placement": {"buffers_on_device": ["model.visual.rotary_pos_emb.inv_freq"], "buffers_on_host": [],
                          "parameters_last_moved_to": ["host"], "buffer_moves": []},
            "loss": 10.0, "reference_loss": 10.0, "max_abs_logprob_err": 0.0, "seconds": 1.0,
            "pos_embed": {"vision": True, "method_calls": 0, "index_off_weight_device": False}}
    real.update(changes)
    return real


def test_on_cpu_the_real_run_is_evidence_naming_verls_units_and_placement():
    [evidence] = vv.real_verdicts("qwen3_5", _real(), deciding=False, ran=RAN)
    assert evidence.name == "verl:qwen3_5/real-fsdp2" and evidence.status is Status.PASS and not evidence.emulated
    assert "cannot show a site" in evidence.message and "model.visual.pos_embed" in evidence.message
    assert "model.visual.rotary_pos_emb.inv_freq" in evidence.message
    [differs] = vv.real_verdicts("qwen3_5", _real(loss=11.0), deciding=False, ran=RAN)
    assert differs.status is Status.FAIL


def test_on_an_accelerator_the_real_run_decides_step_and_pos_embed():
    off = _real(param_dtype="bfloat16", pin_memory=True,
                pos_embed={"vision": True, "method_calls": 1, "index_off_weight_device": True,
                           "embedding_calls": [{"input_devices": ["cpu"], "weight_device": "cuda:0"}]})
    verdicts = _by_name(vv.real_verdicts("qwen3_5", off, deciding=True, ran=RAN))
    assert verdicts["verl:qwen3_5/pos-embed"].status is Status.FAIL
    assert "pin_memory=True" in verdicts["verl:qwen3_5/step"].message
    assert verdicts["verl:qwen3_5/step"].status is Status.PASS


def test_verl_code_that_cannot_run_here_is_a_skip_naming_where_and_a_raise_a_failure():
    here = {"error_class": "ModuleNotFoundError", "error": "No module named 'flash_attn'",
            "where": "verl/utils/attention_utils.py:30",
            "cannot_run_here": "verl/utils/attention_utils.py:30 imports flash_attn, a package only accelerator "
                               "machines have: it runs on a GPU/NPU runner"}
    [evidence] = vv.real_verdicts("qwen3_5_text", _real(failure=here), deciding=False, ran=RAN)
    assert evidence.status is Status.SKIP and "attention_utils.py:30" in evidence.message
    failed = vv._failure_verdicts("qwen3_5", {**here, "cannot_run_here": "", "error_class": "ImportError"}, "", RAN)
    assert [(v.name, v.status) for v in failed] == [("verl:qwen3_5/step", Status.FAIL),
                                                   ("verl:qwen3_5/pos-embed", Status.FAIL)]


def test_ranks_that_die_become_the_verl_verdicts_status(monkeypatch, tmp_path):
    from harness.checks import CheckOptions

    monkeypatch.setattr(vv, "_real_fsdp", lambda options, plan, out_dir: (None, Status.CRASH, "ranks exited with [1]"))
    monkeypatch.setattr(vv, "_ran", lambda pos_embed=None, stepped=True: RAN)
    verdicts, _ = vv.verl_part(CheckOptions(work_dir=tmp_path), plan=None, out_dir=tmp_path)
    assert {v.status for v in verdicts} == {Status.CRASH} and len(verdicts) == 3


def test_a_failing_verl_verdict_fails_the_check():
    [failed] = vv._failure_verdicts("qwen3_5_text", {"error_class": "ImportError", "error": "x", "where": "w",
                                                     "cannot_run_here": ""}, "", RAN)
    status, message = vv.with_verl(Status.AFFECTED, "upstream affected", [failed])
    assert status is Status.FAIL and "verl: 1 failed (verl:qwen3_5_text/step)" in message
    assert vv.with_verl(Status.PASS, "fine", []) == (Status.PASS, "fine")
    [evidence] = vv._failure_verdicts("qwen3_5_text", {"error_class": "E", "error": "x", "where": "w",
                                                       "cannot_run_here": ""}, "/strict-emulation", RAN)
    assert vv.with_verl(Status.PASS, "fine", [evidence]) == (Status.PASS, "fine")  # not deciding on this runner
