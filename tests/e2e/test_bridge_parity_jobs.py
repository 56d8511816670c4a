"""The HF <-> Megatron mapping (exact round trips), the packed-batch refusal, and bridge-parity."""
from __future__ import annotations

import importlib.util

import pytest

from trainers.megatron.config import MegatronTrainConfig, resolve

HAVE_MEGATRON = (importlib.util.find_spec("megatron") is not None
                 and importlib.util.find_spec("megatron.core") is not None)


@pytest.mark.parametrize("layout", [{"use_remove_padding": True}, {"packed": True}, {"qkv_format": "thd"}])
def test_packed_configurations_are_recognised(layout):
    config = MegatronTrainConfig(**layout)
    config.validate()  # the refusal is measured on the built model, not decided here
    assert config.wants_packed
    assert not MegatronTrainConfig().wants_packed


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="pipeline parallelism is not implemented"):
        MegatronTrainConfig(pp=2).validate()
    with pytest.raises(ValueError, match="expert parallelism needs the moe model"):
        MegatronTrainConfig(ep=2).validate()
    assert resolve(["--model", "moe", "--ep", "2"]).ep == 2


def _text_model():
    from trainers.megatron.model import build_hf_variant

    return build_hf_variant("hybrid", {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]},
                            seed=1)


@pytest.mark.skipif(importlib.util.find_spec("mbridge") is None, reason="mbridge is not installed")
def test_bridge_support_records_the_real_mbridge_error():
    from trainers.megatron import bridge

    report = bridge.bridge_support(_text_model().config)
    assert report["mbridge"]
    # what mbridge's own registry says decides which answer is right (0.15.1 has no Qwen3.5): an error naming the
    # model where it lacks it, none where a release registers it
    if _mbridge_registers("qwen3_5_text"):
        assert report["mbridge_error"] is None, report
    else:
        assert "qwen3_5_text" in (report["mbridge_error"] or ""), report
    assert bridge.chosen_bridge(report) == bridge.PROJECT_MAPPING


def _mbridge_registers(model_type: str) -> bool:
    from mbridge.core.bridge import _MODEL_REGISTRY

    return model_type in _MODEL_REGISTRY


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
def test_bridge_parity_passes_on_hybrid_and_moe_at_tp1_tp2_ep2(tmp_path):
    from harness.checks import CheckOptions
    from harness.checks.bridge_parity import GRAD_RTOL, LOGPROB_ATOL, run
    from harness.results.records import Status

    result = run(CheckOptions(backend="megatron", work_dir=tmp_path))
    verdicts = {v.name: v for v in result.verdicts}
    assert result.status == Status.PASS, result.message
    for name in ("text-hybrid-tp1", "text-hybrid-tp2", "moe-hybrid-tp1", "moe-hybrid-tp2", "moe-hybrid-ep2"):
        metrics = verdicts[name].metrics
        assert metrics["max_abs_logprob_error"] <= LOGPROB_ATOL and metrics["roundtrip_exact"], name
        assert metrics["max_rel_grad_error"] <= GRAD_RTOL and metrics["gated_delta_net_layers"] == 3, name
    for name in ("text-hybrid-mtp-tp1", "vl-hybrid-mtp-tp2", "moe-hybrid-mtp-ep2"):  # MTP on, every job
        assert verdicts[name].metrics["mtp_tensors"] > 0 and not verdicts[name].metrics["unwritten"], name
    assert verdicts["packed-gdn"].status == Status.PASS
    assert result.metrics["bridge"]
    parts = result.metrics["seconds_by_part"]  # each job timed apart, within the check's own seconds
    assert {"preload", "tp1", "tp2", "ep2"} <= set(parts) and sum(parts.values()) <= result.metrics["seconds"] + 0.1
    if not result.metrics["fla_installed"]:  # the shim bound exactly FLA's two names (and TE's router gemm)
        assert {"gated_delta_net.HAVE_FLA", "gated_delta_net.l2norm"} <= set(result.metrics["shim_symbols"])


# Each deliberately broken piece, the job that runs it, and the verdict that must fail.
BROKEN = {"gdn-head-order": ("tp1", "text-hybrid-tp1"), "expert-swap": ("ep2", "moe-hybrid-ep2"),
          "shim-l2norm": ("tp1", "text-hybrid-tp1"), "packed": ("tp1", "packed-gdn"),
          "grad-skip": ("tp2", "text-hybrid-tp2"), "qkv": ("tp2", "text-hybrid-tp2"),
          "padding-row": ("tp1", "text-hybrid-tp1"), "mtp-drop": ("tp2", "vl-hybrid-mtp-tp2"),
          "mtp-rename": ("ep2", "moe-hybrid-mtp-ep2")}


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_bridge_parity_fails_on_each_broken_piece(tmp_path, broken):
    from harness.checks import CheckOptions
    from harness.checks.bridge_parity import run
    from harness.results.records import Status

    job, verdict = BROKEN[broken]
    result = run(CheckOptions(backend="megatron", work_dir=tmp_path), broken=broken, jobs=(job,))
    verdicts = {v.name: v for v in result.verdicts}
    assert result.status == Status.FAIL
    assert verdicts[verdict].status == Status.FAIL, verdicts[verdict].message
    if broken == "shim-l2norm":
        assert "l2norm" in verdicts[verdict].message  # megatron-core's own NameError
    if broken.startswith("mtp-"):  # the tensor is named, and the MTP-off verdict of the same job still passes
        assert ("mtp.pre_fc_norm_embedding.weight" if broken == "mtp-drop" else "mtp.norm.weight") in (
            verdicts[verdict].message)
        assert verdicts[verdict.replace("-mtp", "").replace("vl-", "text-")].status == Status.PASS
    if broken == "grad-skip":
        assert "gradient error" in verdicts[verdict].message and verdicts[verdict].metrics["roundtrip_exact"]


LAUNCH_PROBE = """
import json, sys, tempfile, torch
from harness.checks import CheckOptions
from harness.checks.bridge_parity import run
if sys.argv[1] == "threads":  # an OpenMP pool: native threads a fork would drop
    torch.set_num_threads(2)
    torch.ones(512, 512) @ torch.ones(512, 512)
with tempfile.TemporaryDirectory() as work:
    result = run(CheckOptions(backend="megatron", work_dir=work), jobs=("tp2",))
print(json.dumps({"status": result.status.value, "ranks": result.metrics["ranks"]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
@pytest.mark.parametrize(("state", "launcher"), [("fresh", "forked"), ("threads", "torchrun")])
def test_bridge_parity_forks_its_ranks_unless_this_process_has_native_threads(state, launcher):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", LAUNCH_PROBE, state], capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[2],
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"status": "pass", "ranks": {"tp2": launcher}}


ASKED_PROBE = """
import json, os, sys, tempfile
from harness.checks import CheckOptions
from harness.checks.bridge_parity import run
from trainers.megatron import bridge
real = bridge.bridge_support
def recorded(config):  # forked ranks inherit it, so a rank's question is seen too
    with open(os.path.join(work, "asked"), "a") as out:
        out.write(f"{os.getpid()} {config.model_type}\\n")
    return real(config)
bridge.bridge_support = recorded
with tempfile.TemporaryDirectory() as work:
    result = run(CheckOptions(backend="megatron", work_dir=work), jobs=("tp1",))
    asked = [line.split() for line in open(os.path.join(work, "asked"))]
print(json.dumps({"status": result.status.value, "ranks": result.metrics["ranks"], "asked": asked,
                  "me": str(os.getpid()), "mbridge": result.metrics["mbridge"],
                  "mbridge_error": result.metrics["mbridge_error"]}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
def test_the_bridges_are_asked_in_the_checks_process_never_in_the_projects_ranks():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", ASKED_PROBE], capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[2],
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["status"] == "pass" and found["ranks"] == {"tp1": "forked"}
    # once per model the project's jobs build, by the check's own process; the result still records the answer
    assert sorted(found["asked"]) == [[found["me"], "qwen3_5_moe_text"], [found["me"], "qwen3_5_text"]]
    if importlib.util.find_spec("mbridge") is None:
        assert found["mbridge"] is None and found["mbridge_error"] == "mbridge is not installed"
    else:
        assert found["mbridge"], found
        if _mbridge_registers("qwen3_5_text"):  # the metrics carry the first case's answer: the text model's
            assert found["mbridge_error"] is None, found
        else:
            assert "qwen3_5" in (found["mbridge_error"] or ""), found
