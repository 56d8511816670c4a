"""Tiny Qwen3.5 checkpoints carry their MTP tensors as released checkpoints lay them out: top-level `mtp.*` in the
text, MoE and VL checkpoints, the MoE MTP layer's routed experts one by one, and a VL checkpoint's language model
moved to and from the text model's names."""
from __future__ import annotations

import pytest
import torch

from trainers import mtp
from trainers.models import build_model


@pytest.mark.parametrize("kind", ["text", "moe", "vl"])
def test_a_saved_checkpoint_holds_its_mtp_tensors_at_the_top_level(tmp_path, kind):
    model = build_model(kind, seed=3)
    written = mtp.save_checkpoint(model, tmp_path, seed=3)
    state = mtp.read_checkpoint(tmp_path)
    names = [k for k in state if "mtp" in k]
    assert names and all(k.startswith("mtp.") for k in names)  # never under model. or model.language_model.
    assert set(names) == set(written) and all(torch.equal(state[k], written[k]) for k in written)
    assert {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
            "mtp.norm.weight", "mtp.layers.0.self_attn.q_proj.weight"} <= set(names)
    hidden = mtp.text_config(model.config).hidden_size
    assert state["mtp.fc.weight"].shape == (hidden, 2 * hidden)
    assert mtp.mtp_layers(type(model.config).from_pretrained(tmp_path)) == 1
    if kind == "moe":  # Qwen3.5 stores the MTP layer's routed experts one by one
        assert "mtp.layers.0.mlp.experts.0.gate_proj.weight" in state
    assert not any(torch.equal(state["mtp.pre_fc_norm_embedding.weight"], state[k])
                   for k in ("mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"))  # seeded, not module defaults


def test_packed_mtp_experts_are_stacked():
    config = build_model("moe", seed=0).config
    shapes = mtp.mtp_shapes(config, layers=1, packed=True)
    assert "mtp.layers.0.mlp.experts.gate_up_proj" in shapes
    assert "mtp.layers.0.mlp.experts.0.gate_proj.weight" not in shapes
    assert mtp.mtp_shapes(config, layers=0) == {}


def test_a_vl_checkpoint_moves_to_the_text_names_and_back(tmp_path):
    model = build_model("vl", seed=0)
    mtp.save_checkpoint(model, tmp_path)
    state = mtp.read_checkpoint(tmp_path)
    text, vision = mtp.as_text(state)
    assert vision and all(k.startswith(("model.visual.", "model.language_model.visual.")) for k in vision)
    assert "model.embed_tokens.weight" in text and "mtp.fc.weight" in text and "lm_head.weight" in text
    assert mtp.as_released(text, vl=True).keys() == state.keys() - vision.keys()
    assert mtp.as_text(text) == (text, {})  # a text checkpoint comes back whole


def test_a_vision_tower_written_under_the_language_models_prefix_stays_outside_the_text_names():
    """transformers 5.5.3 saves the Qwen3.5 VL vision tower as `model.language_model.visual.*`: still the vision
    tower, never a language-model tensor the text mapping would be asked to convert."""
    state = {"model.language_model.visual.blocks.0.attn.qkv.weight": 1, "model.language_model.norm.weight": 2,
             "mtp.fc.weight": 3, "lm_head.weight": 4}
    text, vision = mtp.as_text(state)
    assert vision == {"model.language_model.visual.blocks.0.attn.qkv.weight": 1}
    assert text == {"model.norm.weight": 2, "mtp.fc.weight": 3, "lm_head.weight": 4}
