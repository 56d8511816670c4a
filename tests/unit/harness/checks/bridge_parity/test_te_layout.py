"""The project's Megatron parameter names meet those of Transformer Engine's layout."""
from __future__ import annotations

from harness.checks.bridge_parity import te_layout


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
