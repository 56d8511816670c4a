"""offload-regression's verl part on 2 ranks forked from the check's process: verl's own apply_fsdp2 and
fsdp2_load_full_state_dict make the units and the placement the emulation is fed with (needs verl)."""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from harness.checks import CheckOptions
from harness.results.records import Status

pytestmark = [pytest.mark.slow, pytest.mark.versions, pytest.mark.verl]


def test_verls_units_and_placement_feed_the_verdicts(tmp_path):
    pytest.importorskip("verl.workers.engine.fsdp.transformer_impl")
    import transformers

    from harness.checks.offload_regression.verl_verdicts import verl_part
    from trainers.runtime.device import plan

    torch.set_num_threads(1)
    verdicts, metrics = verl_part(CheckOptions(work_dir=tmp_path), plan("cpu"), tmp_path / "offload_regression")
    by_name = {v.name: v for v in verdicts}
    text = by_name["verl:qwen3_5_text/real-fsdp2"]  # verl patches nothing for text: its set-up runs on every release
    assert not text.emulated and "cannot show a site" in text.message
    assert text.metrics["placement"]["buffers_on_device"] == ["model.rotary_emb.inv_freq",
                                                              "model.rotary_emb.original_inv_freq"]
    assert {"model.embed_tokens", "lm_head", "<root>"} <= set(text.metrics["units"])
    ran = text.metrics["verl"]["ran"]
    assert "verl.utils.fsdp_utils.apply_fsdp2" in ran and "verl.utils.fsdp_utils.fsdp2_load_full_state_dict" in ran
    if Version(transformers.__version__) >= Version("5.11"):  # outside verl 0.9's range: its VL patch fails
        assert by_name["verl:qwen3_5/step"].status is Status.FAIL
        return
    vl = by_name["verl:qwen3_5/real-fsdp2"]
    assert "model.visual.pos_embed" in vl.metrics["units"]
    assert "model.visual.rotary_pos_emb.inv_freq" in vl.metrics["placement"]["buffers_on_device"]
    for model_type in ("qwen3_5", "qwen3_5_moe", "qwen3_5_text"):
        step = by_name[f"verl:{model_type}/step"]
        assert step.emulated and step.status in (Status.PASS, Status.SKIP), step.message
    assert metrics["seconds"] > 0
