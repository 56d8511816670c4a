"""The zoo's model configs (trainers/models.py): a --model-config key is one the config class has or one a released
Qwen3.5 config carries (plans/models/released-keys.toml); anything else is refused, naming the key."""
from __future__ import annotations

import pytest

from trainers import models
from trainers.errors import TrainerInputError

pytest.importorskip("transformers")


@pytest.mark.parametrize("kind, override, key", [
    ("text", {"foo": 1}, "foo"),
    ("moe", {"foo": 1}, "foo"),
    ("vl", {"foo": 1}, "foo"),
    ("vl", {"text_config": {"foo": 1}}, "text_config.foo"),
    ("vl", {"vision_config": {"mamba_ssm_dtype": "float32"}}, "vision_config.mamba_ssm_dtype"),  # a text key
    ("text", {"rope_parameters": {"rope_thetta": 1.0}}, "rope_parameters.rope_thetta"),
    ("text", {"num_experts": 4}, "num_experts"),  # an MoE key given for the dense model
])
def test_a_key_neither_the_class_nor_a_released_config_has_is_refused_by_name(kind, override, key):
    with pytest.raises(TrainerInputError) as info:
        models.check_override(kind, override, "cfg.json")
    assert f"cfg.json: unknown key {key!r} for a {kind} Qwen3.5 config" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_near_miss_is_named_with_the_key_it_misses():
    with pytest.raises(TrainerInputError, match="did you mean 'num_hidden_layers'"):
        models.check_override("text", {"num_hiden_layers": 2}, "cfg.json")


@pytest.mark.parametrize("kind, override", [
    ("text", {"mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, "attn_output_gate": True, "head_dim": 64}),
    ("moe", {"mamba_ssm_dtype": "float32", "output_router_logits": False, "mtp_use_dedicated_embeddings": False}),
    ("vl", {"text_config": {"mamba_ssm_dtype": "float32", "mlp_only_layers": []},
            "vision_config": {"deepstack_visual_indexes": []}, "transformers_version": "5.23.0"}),
])
def test_keys_of_the_released_configs_pass(kind, override):
    models.check_override(kind, override, "cfg.json")


def test_every_zoo_kind_has_released_keys_with_their_sources():
    assert set(models.MODEL_TYPES) == set(models.MODEL_KINDS)
    for model_type in models.MODEL_TYPES.values():
        assert models._released_tables()[model_type]["sources"]
        assert "mamba_ssm_dtype" in models.released_keys(model_type) or model_type == "qwen3_5"
    assert "mamba_ssm_dtype" in models.released_keys("qwen3_5")["text_config"]
