"""patch-parity's verl verdicts: the chunk-rule watcher and the verdicts from stand-in measurements run everywhere;
the measurements of verl's own forwards, and the break test (cu_seqlens dropped from the model inputs), need verl
(`pytest.importorskip`: the tests-verl session installs it)."""
from __future__ import annotations

import inspect

import pytest
import torch
from packaging.version import Version

from harness.checks.patch_parity import verl_forwards as vf
from harness.results.records import Status

TOLERANCE = 1e-5


def rule_with_var_kwargs(query, key, value, g=None, beta=None, initial_state=None, output_final_state=False,
                         use_qk_l2norm_in_kernel=False, **kwargs):
    return query, None


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.chunk_gated_delta_rule = rule_with_var_kwargs


def test_the_watcher_counts_calls_and_cu_seqlens_without_changing_what_verl_reads():
    model = torch.nn.Sequential(Layer(), Layer())
    with vf.chunk_rule_watched(model, explicit=False) as seen:
        rule = model[0].chunk_gated_delta_rule
        kinds = [p.kind for p in inspect.signature(rule).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD in kinds  # verl's _call_accepts_kwarg answers as it would unwatched
        rule(1, 2, 3, cu_seqlens=torch.tensor([0, 2]))
        model[1].chunk_gated_delta_rule(1, 2, 3)
    assert seen == {"rule": f"{__name__}.rule_with_var_kwargs", "calls": 2, "calls_with_cu_seqlens": 1, "layers": 2}
    assert model[0].chunk_gated_delta_rule is rule_with_var_kwargs


def test_the_forced_fallback_has_no_var_kwargs():
    model = Layer()
    with vf.chunk_rule_watched(model, explicit=True) as seen:
        params = inspect.signature(model.chunk_gated_delta_rule).parameters
        assert "cu_seqlens" not in params and all(p.kind != p.VAR_KEYWORD for p in params.values())
        model.chunk_gated_delta_rule(1, 2, 3, g=4, beta=5)
    assert seen["calls"] == 1


def _case(err, calls=3, with_cu=3, passes=True):
    return {"max_abs_err": err, "per_sequence": [0.0, err, err], "engine_passes_cu_seqlens": passes,
            "chunk_rule": {"rule": "transformers.x.torch_chunk_gated_delta_rule", "calls": calls,
                           "calls_with_cu_seqlens": with_cu, "layers": 3}}


def ran():  # a stand-in for the verl functions a verdict records
    pass


def _measured(packed, padded, fallback=None, patched=True):
    out = {"ran": [ran], "patched": [ran] if patched else [], "causal_conv1d_fn": "None",
           "packed": packed, "padded": padded}
    if fallback is not None:
        out["fallback"] = fallback
    return out


def test_a_kernel_that_ignores_cu_seqlens_fails_packed_and_gdn_path_with_the_explanation():
    measured = _measured(_case(2.7e-3), _case(4.8e-7), fallback=_case(4.8e-7, calls=9, with_cu=0))
    verdicts = {v.name: v for v in vf.model_verdicts("qwen3_5", measured, TOLERANCE)}
    assert verdicts["verl:qwen3_5/padded"].status is Status.PASS
    packed, path = verdicts["verl:qwen3_5/packed"], verdicts["verl:qwen3_5/gdn-path"]
    assert packed.status is Status.FAIL and "which ignores them" in packed.message
    assert "sequences [2, 3]" in packed.message
    assert path.status is Status.FAIL and "_call_accepts_kwarg" in path.message and "4.8e-07" in path.message
    assert "verl's per-sequence causal conv fallback" in path.message


def test_the_text_model_verl_does_not_patch_fails_packed_saying_so():
    measured = _measured(_case(3.6e-2, calls=3, with_cu=0, passes=False), _case(4.8e-7, passes=False), patched=False)
    verdicts = {v.name: v for v in vf.model_verdicts("qwen3_5_text", measured, TOLERANCE)}
    assert set(verdicts) == {"verl:qwen3_5_text/packed", "verl:qwen3_5_text/padded"}
    assert verdicts["verl:qwen3_5_text/packed"].status is Status.FAIL
    assert ("verl's apply_monkey_patch patches nothing for this model type (qwen3_5_text); packed input mixes "
            "sequences") in verdicts["verl:qwen3_5_text/packed"].message


def test_verls_fallback_taken_and_exact_passes():
    measured = _measured(_case(4.8e-7, calls=9, with_cu=0), _case(4.8e-7), fallback=_case(4.8e-7, calls=9, with_cu=0))
    verdicts = {v.name: v for v in vf.model_verdicts("qwen3_5_moe", measured, TOLERANCE)}
    assert {v.status for v in verdicts.values()} == {Status.PASS}
    assert "9 times without cu_seqlens" in verdicts["verl:qwen3_5_moe/gdn-path"].message


def test_a_patch_that_does_not_import_fails_and_code_needing_an_accelerator_package_skips():
    failure = {"error_class": "ImportError", "error": "cannot import name 'X'", "where": "verl/models/x.py:26",
               "cannot_run_here": ""}
    verdicts = vf.model_verdicts("qwen3_5", {"ran": [ran], "patch_failure": failure}, TOLERANCE)
    assert [(v.name, v.status) for v in verdicts] == [("verl:qwen3_5/packed", Status.FAIL),
                                                     ("verl:qwen3_5/padded", Status.FAIL)]
    assert "verl/models/x.py:26" in verdicts[0].message
    here = {**failure, "cannot_run_here": "verl/utils/attention_utils.py:30 imports flash_attn, ..."}
    skipped = vf.model_verdicts("qwen3_5", _measured({"failure": here}, {"failure": here}), TOLERANCE)
    assert {v.status for v in skipped} == {Status.SKIP} and "attention_utils.py:30" in skipped[0].message


# --- verl's own forwards (need verl) -------------------------------------------------------------------------------

def _verl():
    pytest.importorskip("verl.workers.engine.fsdp.transformer_impl")
    from harness.checks.support import verl

    verl.use_cpu_platform()
    import transformers

    return Version(transformers.__version__)


@pytest.mark.verl
def test_verls_forwards_against_stock_on_the_vl_model():
    release = _verl()
    measured = vf.measure("qwen3_5", 0, torch.device("cpu"))
    if "patch_failure" in measured:  # outside verl's range (5.23: verl's qwen3_5 module does not import)
        assert release >= Version("5.11")
        return
    verdicts = {v.name: v for v in vf.model_verdicts("qwen3_5", measured, TOLERANCE)}
    assert verdicts["verl:qwen3_5/padded"].status is Status.PASS
    assert measured["fallback"]["max_abs_err"] <= TOLERANCE  # verl's own per-sequence fallback is exact
    if release >= Version("5.9") and not vf.importlib.util.find_spec("fla"):
        assert verdicts["verl:qwen3_5/packed"].status is Status.FAIL and "ignores them" in verdicts[
            "verl:qwen3_5/gdn-path"].message
    elif release < Version("5.9"):
        assert verdicts["verl:qwen3_5/packed"].status is Status.PASS


@pytest.mark.verl
def test_cu_seqlens_dropped_from_the_model_inputs_is_caught(monkeypatch):
    """The break: verl's engine no longer hands cu_seqlens to the model. Even verl's per-sequence fallback then
    runs over the whole packed row, so the forced fallback, exact unbroken, mixes the sequences too."""
    release = _verl()
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    prepare = FSDPEngineWithLMHead.prepare_model_inputs

    def without_cu_seqlens(self, micro_batch):
        inputs, output_args = prepare(self, micro_batch)
        inputs.pop("cu_seqlens", None)
        inputs.pop("cu_seqlens_cpu", None)
        return inputs, output_args

    monkeypatch.setattr(FSDPEngineWithLMHead, "prepare_model_inputs", without_cu_seqlens)
    measured = vf.measure("qwen3_5", 0, torch.device("cpu"))
    if "patch_failure" in measured:
        assert release >= Version("5.11")
        pytest.skip("verl's patch does not import on this transformers")
    verdicts = {v.name: v for v in vf.model_verdicts("qwen3_5", measured, TOLERANCE)}
    assert verdicts["verl:qwen3_5/packed"].status is Status.FAIL
    assert measured["packed"]["max_abs_err"] > 1e-3 and measured["fallback"]["max_abs_err"] > 1e-3
    assert measured["packed"]["chunk_rule"]["calls_with_cu_seqlens"] == 0
    assert verdicts["verl:qwen3_5/gdn-path"].status is Status.FAIL
