"""Megatron-Bridge's own Qwen3.5 bridges through bridge-parity, with the real package (a Megatron-Bridge cell's
environment): every verdict passes (those run on the project's CPU layers marked emulated), each deliberately
broken piece fails the verdicts that exist to catch it, and the installed package failing to import is an
error, not a skip."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HAVE_MEGATRON_BRIDGE = (importlib.util.find_spec("megatron") is not None
                        and importlib.util.find_spec("megatron.bridge") is not None)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not HAVE_MEGATRON_BRIDGE, reason="megatron-bridge is not installed")]


ROOT = Path(__file__).resolve().parents[2]
LIBRARY_JOBS = ("megatron-bridge-tp1", "megatron-bridge-tp2", "megatron-bridge-ep2")


def _run(tmp_path, broken=None, jobs=LIBRARY_JOBS):
    from harness.checks import CheckOptions, bridge_parity

    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path), broken=broken, jobs=jobs)
    return result, {v.name: v for v in result.verdicts}


def test_megatron_bridges_own_bridges_agree_with_hf_and_the_project_mapping(tmp_path):
    from harness.results.records import Status

    result, verdicts = _run(tmp_path)
    # Megatron-Bridge 0.6.2 has no mapping for a MoE MTP layer's SequentialMLP experts (moe_grouped_gemm is off
    # on CPU), and its load raises on them: that verdict may fail, and only for those parameters, named
    refused = {name for name, v in verdicts.items() if v.status != Status.PASS and name.endswith("/mtp-roundtrip")
               and name.startswith("megatron-bridge/moe-hybrid-")}
    for name in refused:
        unmapped = verdicts[name].metrics["unmapped"]
        assert unmapped and all(".local_experts." in n for n in unmapped), verdicts[name].message
        assert "SequentialMLP" in verdicts[name].message and unmapped[0] in verdicts[name].message
    assert (result.status == Status.PASS) == (not refused), result.message
    assert not refused or set(result.message.removeprefix("failed: ").split(", ")) == refused, result.message
    layouts = {"text-hybrid": ("tp1", "tp2"), "moe-hybrid": ("tp1", "tp2", "ep2")}
    for case, cls in (("text-hybrid", "Qwen35Bridge"), ("moe-hybrid", "Qwen35MoEBridge")):
        for layout in layouts[case]:
            for aspect in ("roundtrip", "logprobs", "grads", "project-mapping", "mtp-roundtrip"):
                verdict = verdicts[f"megatron-bridge/{case}-{layout}/{aspect}"]
                assert verdict.status == Status.PASS or verdict.name in refused, verdict.message
                # conversion is Megatron-Bridge's; log-probs and gradients ran on the project's CPU layers
                assert verdict.emulated == (aspect in ("logprobs", "grads")), verdict
                if verdict.emulated:
                    assert "MaskedGatedDeltaNet" in verdict.message and "CpuRMSNorm" in verdict.message
                assert verdict.metrics["bridge"].endswith(f"({cls})")
                assert (verdict.metrics["tp"], verdict.metrics["ep"]) == {"tp1": (1, 1), "tp2": (2, 1),
                                                                          "ep2": (1, 2)}[layout]
    for name in ("megatron-bridge/vl", "megatron-bridge/vl/mtp-roundtrip"):
        assert verdicts[name].status == Status.SKIP and "qwen35_vl_provider.py line" in verdicts[name].message
    if importlib.util.find_spec("transformer_engine") is None:  # the stand-in reached only the LoRA module
        assert result.metrics["megatron_bridge_import"]["stand_in_served"] == [
            "megatron.bridge.peft.lora_layers: import transformer_engine.pytorch"]


# broken piece -> the verdicts (of text-hybrid) that must fail; the others must still pass
BROKEN = {"mb-perturb": {"roundtrip", "logprobs", "grads", "project-mapping"},
          "mb-drop": {"roundtrip"},
          "mb-mapping": {"logprobs", "grads", "project-mapping"},  # symmetric: its round trip stays exact
          "mb-grad": {"grads"},
          "mb-mtp-drop": {"mtp-roundtrip"},
          "mb-mtp-rename": {"mtp-roundtrip"}}
# broken piece -> what the failing MTP verdict must name
NAMED = {"mb-mtp-drop": ("unwritten ['mtp.pre_fc_norm_embedding.weight']",),
         "mb-mtp-rename": ("unwritten ['mtp.norm.weight']", "renamed ['mtp.final_layernorm.weight']")}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_each_broken_piece_fails_its_verdicts(tmp_path, broken):
    from harness.results.records import Status

    result, verdicts = _run(tmp_path, broken, jobs=("megatron-bridge-tp1",))
    failed = {name.rsplit("/", 1)[1] for name, v in verdicts.items()
              if name.startswith("megatron-bridge/text-hybrid-tp1/") and v.status == Status.FAIL}
    assert failed == BROKEN[broken] and result.status == Status.FAIL
    for text in NAMED.get(broken, ()):
        assert text in verdicts["megatron-bridge/text-hybrid-tp1/mtp-roundtrip"].message


def test_an_installed_megatron_bridge_that_fails_to_import_is_an_error(tmp_path):
    """Without the Transformer Engine stand-in the real `import megatron.bridge` fails on a CPU runner (its LoRA
    module imports transformer_engine at module level): the row pins it, so that is an error. The stand-in is
    turned off in every process of a fresh run (a sitecustomize on its path): the check's own, which imports
    Megatron-Bridge before forking, and its ranks, forked or torchrun's."""
    import importlib.util as util
    import json
    import os
    import subprocess
    import sys

    if util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed: megatron.bridge imports without the stand-in")
    startup = tmp_path / "no-stand-in"
    startup.mkdir()
    (startup / "sitecustomize.py").write_text(NO_STAND_IN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(startup), str(ROOT),
                                                                    os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", RUN_TP1, str(tmp_path / "work")], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "error", (result["message"], result["metrics"].get("ranks"))
    assert {v["status"] for v in result["verdicts"]} == {"error"}
    assert all("transformer_engine" in v["message"] and "the row pins it" in v["message"] for v in result["verdicts"])


NO_STAND_IN = """
from harness.checks.bridge_parity import te_import
te_import.install = lambda: None  # no stand-in: the real import, as on a CPU runner without it
"""
RUN_TP1 = """
import json, sys
from pathlib import Path
from harness.checks import CheckOptions, bridge_parity
result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=Path(sys.argv[1])), jobs=("megatron-bridge-tp1",))
print(json.dumps(result.to_dict()))
"""


MTP_SPEC_PROBE = """
import json, types
from harness.checks.bridge_parity import te_import
te_import.install()
from megatron.bridge.models import gpt_provider
from megatron.core.models.gpt import gpt_layer_specs
from harness.checks.bridge_parity import provider, te_layout
try:
    gpt_layer_specs.get_gpt_mtp_block_spec(types.SimpleNamespace(use_kitchen=False), None, use_transformer_engine=True)
    own = None
except Exception as exc:
    own = f"{type(exc).__name__}: {exc}"
own_function = gpt_provider.mtp_block_spec
with provider._mtp_spec(True) as recorded:
    inside = gpt_provider.mtp_block_spec is te_layout.mtp_block_spec
print(json.dumps({"own": own, "inside": inside, "restored": gpt_provider.mtp_block_spec is own_function,
                  "recorded": recorded}))
"""


def test_the_providers_own_mtp_block_needs_transformer_engine_so_cpu_builds_it_in_te_layout_for_the_build_only():
    """Why a CPU rank replaces Megatron-Bridge's gpt_provider.mtp_block_spec while the model is built (provider.py
    `_mtp_spec`): it asks megatron-core for Transformer Engine's MTP spec, whose provider is None without it. In a
    process of its own, so that this one does not import megatron.bridge (the forked ranks must import it fresh)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed: the provider's own MTP spec builds")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", MTP_SPEC_PROBE], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["own"] and "NoneType" in found["own"], found
    assert found["inside"] and found["restored"]
    assert found["recorded"]["to"] == "te_layout.mtp_block_spec"
    assert "gpt_provider.py line" in found["recorded"]["why"] and "use_transformer_engine=True" in \
        found["recorded"]["why"]
