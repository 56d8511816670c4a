"""Megatron-Bridge's own Qwen3.5 bridges through bridge-parity, with the real package (a Megatron-Bridge cell's
environment): every verdict passes (those run on the project's CPU layers marked emulated), each deliberately
broken piece fails the verdicts that exist to catch it, and the installed package failing to import is an
error, not a skip."""
from __future__ import annotations

import importlib.util

import pytest

HAVE_MEGATRON_BRIDGE = (importlib.util.find_spec("megatron") is not None
                        and importlib.util.find_spec("megatron.bridge") is not None)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not HAVE_MEGATRON_BRIDGE, reason="megatron-bridge is not installed")]


LIBRARY_JOBS = ("megatron-bridge-tp1", "megatron-bridge-tp2", "megatron-bridge-ep2")


def _run(tmp_path, broken=None, jobs=LIBRARY_JOBS):
    from harness.checks import CheckOptions, bridge_parity

    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path), broken=broken, jobs=jobs)
    return result, {v.name: v for v in result.verdicts}


def test_megatron_bridges_own_bridges_agree_with_hf_and_the_project_mapping(tmp_path):
    from harness.results.records import Status

    result, verdicts = _run(tmp_path)
    assert result.status == Status.PASS, result.message
    layouts = {"text-hybrid": ("tp1", "tp2"), "moe-hybrid": ("tp1", "tp2", "ep2")}
    for case, cls in (("text-hybrid", "Qwen35Bridge"), ("moe-hybrid", "Qwen35MoEBridge")):
        for layout in layouts[case]:
            for aspect in ("roundtrip", "logprobs", "grads", "project-mapping"):
                verdict = verdicts[f"megatron-bridge/{case}-{layout}/{aspect}"]
                assert verdict.status == Status.PASS, verdict.message
                # conversion is Megatron-Bridge's; log-probs and gradients ran on the project's CPU layers
                assert verdict.emulated == (aspect in ("logprobs", "grads")), verdict
                if verdict.emulated:
                    assert "MaskedGatedDeltaNet" in verdict.message and "CpuRMSNorm" in verdict.message
                assert verdict.metrics["bridge"].endswith(f"({cls})")
                assert (verdict.metrics["tp"], verdict.metrics["ep"]) == {"tp1": (1, 1), "tp2": (2, 1),
                                                                          "ep2": (1, 2)}[layout]
    assert verdicts["megatron-bridge/vl"].status == Status.SKIP
    assert "qwen35_vl_provider.py line" in verdicts["megatron-bridge/vl"].message
    if importlib.util.find_spec("transformer_engine") is None:  # the stand-in reached only the LoRA module
        assert result.metrics["megatron_bridge_import"]["stand_in_served"] == [
            "megatron.bridge.peft.lora_layers: import transformer_engine.pytorch"]


# broken piece -> the verdicts (of text-hybrid) that must fail; the others must still pass
BROKEN = {"mb-perturb": {"roundtrip", "logprobs", "grads", "project-mapping"},
          "mb-drop": {"roundtrip"},
          "mb-mapping": {"logprobs", "grads", "project-mapping"},  # symmetric: its round trip stays exact
          "mb-grad": {"grads"}}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_each_broken_piece_fails_its_verdicts(tmp_path, broken):
    from harness.results.records import Status

    result, verdicts = _run(tmp_path, broken, jobs=("megatron-bridge-tp1",))
    failed = {name.rsplit("/", 1)[1] for name, v in verdicts.items()
              if name.startswith("megatron-bridge/text-hybrid-tp1/") and v.status == Status.FAIL}
    assert failed == BROKEN[broken] and result.status == Status.FAIL


def test_an_installed_megatron_bridge_that_fails_to_import_is_an_error(tmp_path, monkeypatch):
    """Without the Transformer Engine stand-in the real `import megatron.bridge` fails on a CPU runner (its LoRA
    module imports transformer_engine at module level): the row pins it, so that is an error."""
    import importlib.util as util

    from harness.checks.bridge_parity import te_import
    from harness.results.records import Status

    if util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed: megatron.bridge imports without the stand-in")
    monkeypatch.setattr(te_import, "install", lambda: None)  # the forked ranks inherit it
    result, verdicts = _run(tmp_path, jobs=("megatron-bridge-tp1",))
    assert result.status == Status.ERROR, result.message
    assert {v.status for v in verdicts.values()} == {Status.ERROR}
    assert all("transformer_engine" in v.message and "the row pins it" in v.message for v in verdicts.values())
