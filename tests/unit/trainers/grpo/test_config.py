"""Every trainer option is checked before any model is built: its type, finite, in range, named; the
--config and --model-config files and the rollout engine too. One TrainerInputError (exit 2) says it all."""
import importlib.util
import json

import pytest

pytest.importorskip("torch")

from trainers.errors import TrainerInputError  # noqa: E402
from trainers.fsdp.config import TrainConfig  # noqa: E402
from trainers.fsdp.config import resolve as fsdp_resolve  # noqa: E402
from trainers.megatron.config import resolve as megatron_resolve  # noqa: E402


@pytest.mark.parametrize("resolve", [fsdp_resolve, megatron_resolve], ids=["fsdp", "megatron"])
@pytest.mark.parametrize("flags, expected", [
    (["--mode", "fully-async", "--tis-cap", "nan"], "tis_cap=nan (expected a finite number)"),
    (["--tis-cap", "inf"], "tis_cap=inf (expected a finite number)"),
    (["--tis-cap", "0"], "tis_cap=0.0 (expected > 0.0)"),
    (["--temperature", "inf"], "temperature=inf (expected a finite number)"),
    (["--temperature", "0"], "temperature=0.0 (expected > 0.0)"),
    (["--lr", "nan"], "lr=nan (expected a finite number)"),
    (["--lr=-1e-3"], "lr=-0.001 (expected >= 0.0)"),
    (["--clip-eps", "nan"], "clip_eps=nan"),
    (["--clip-eps", "1.5"], "clip_eps=1.5 (expected > 0.0 and <= 1.0)"),
    (["--clip-eps-high=-0.1"], "clip_eps_high=-0.1 (expected > 0.0)"),
    (["--kl-coef=-inf"], "kl_coef=-inf (expected a finite number)"),
    (["--weight-decay=-1"], "weight_decay=-1.0 (expected >= 0.0)"),
    (["--max-grad-norm", "0"], "max_grad_norm=0.0 (expected > 0.0)"),
    (["--seed=-1"], "seed=-1 (expected >= 0 and <= 4294967295)"),
    (["--seed", str(2**32)], "seed=4294967296"),
    (["--group-size", "1"], "group_size=1 (expected >= 2)"),
    (["--steps", "0"], "steps=0 (expected >= 1)"),
    (["--staleness=-1"], "staleness=-1 (expected >= 0)"),
    (["--max-new-tokens=-3"], "max_new_tokens=-3 (expected >= 1)"),
])
def test_every_bad_number_is_refused_by_name(resolve, flags, expected):
    with pytest.raises(TrainerInputError) as info:
        resolve(flags)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_the_megatron_sizes_are_numbers_of_the_same_rule():
    for flag in ("--tp", "--pp", "--cp", "--ep"):
        with pytest.raises(TrainerInputError, match=f"{flag[2:]}=0 \\(expected >= 1\\)"):
            megatron_resolve([flag, "0"])


def test_a_config_file_is_checked_by_the_same_rules(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("lr = nan\n")
    with pytest.raises(TrainerInputError, match=r"lr=nan \(expected a finite number\)"):
        fsdp_resolve(["--config", str(toml)])
    as_json = tmp_path / "c.json"
    for text, expected in [('{"lr": "fast"}', "lr='fast' (expected a number)"),
                           ('{"steps": 2.5}', "steps=2.5 (expected a whole number)"),
                           ('{"steps": true}', "steps=True (expected a whole number)"),
                           ('{"temperature": Infinity}', "temperature=inf"),
                           ("[1, 2]", "expected a table/object"),
                           ("{nope", "not a readable JSON file"),
                           ('{"learning_rate": 1}', "unknown trainer option(s) learning_rate")]:
        as_json.write_text(text)
        with pytest.raises(TrainerInputError) as info:
            fsdp_resolve(["--config", str(as_json)])
        assert expected in str(info.value) and "\n" not in str(info.value), text
    with pytest.raises(TrainerInputError, match="c-missing.toml: not a readable TOML file"):
        fsdp_resolve(["--config", str(tmp_path / "c-missing.toml")])


@pytest.mark.parametrize("resolve", [fsdp_resolve, megatron_resolve], ids=["fsdp", "megatron"])
@pytest.mark.parametrize("text, expected", [
    ("garbage{", "not a JSON file"),
    ("[1, 2]", "expected a JSON object of config keys, got a list"),
    ('{"hidden_size": -64}', "hidden_size: expected a whole number >= 1, got -64"),
    ('{"num_hidden_layers": 0}', "num_hidden_layers: expected a whole number >= 1, got 0"),
    ('{"rope_theta": NaN}', "rope_theta: expected a finite number, got nan"),
    ('{"num_hiden_layers": 2}', "unknown key 'num_hiden_layers'"),
    ('{"text_config": {"hidden_size": 64}}', "unknown key 'text_config' for a text Qwen3.5 config"),  # a VL config
])
def test_a_model_config_that_does_not_fit_the_model_is_named(tmp_path, resolve, text, expected):
    pytest.importorskip("transformers")
    path = tmp_path / "model.json"
    path.write_text(text)
    with pytest.raises(TrainerInputError) as info:
        resolve(["--model-config", str(path)])
    assert f"model_config={path}: " in str(info.value) and expected in str(info.value)
    assert "\n" not in str(info.value)
    with pytest.raises(TrainerInputError, match="absent.json: not a JSON file"):
        resolve(["--model-config", str(tmp_path / "absent.json")])


def test_a_good_model_config_and_checkpoint_directory_pass(tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"num_hidden_layers": 4, "rope_parameters": {"rope_type": "default"}}))
    assert fsdp_resolve(["--model-config", str(path)]).model_config == str(path)
    with pytest.raises(TrainerInputError, match="model_path='.*': not a checkpoint directory"):
        fsdp_resolve(["--model-path", str(tmp_path)])


def test_a_rollout_engine_that_is_not_installed_is_bad_input():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(TrainerInputError, match="rollout='vllm': vLLM is not installed"):
        TrainConfig(rollout="vllm").validate()


def test_extra_keys_of_real_qwen35_configs_pass_and_typos_do_not():
    """vLLM reads `mamba_ssm_dtype` from Qwen3.5's configs (the vLLM checks write it): not a mistake."""
    from trainers import models
    from trainers.errors import TrainerInputError

    models.check_override("text", {"mamba_ssm_dtype": "float32", "head_dim": 64}, "cfg.json")
    with pytest.raises(TrainerInputError, match="unknown key 'num_hiden_layers'"):
        models.check_override("text", {"num_hiden_layers": 2}, "cfg.json")


def test_a_rollout_check_needs_the_hf_engine():
    from trainers.fsdp.config import TrainConfig

    with pytest.raises(ValueError, match="rollout_check='generate' compares the hf engine"):
        TrainConfig(rollout="vllm", rollout_check="generate").validate()
    with pytest.raises(ValueError, match="rollout_check='always'"):
        TrainConfig(rollout_check="always").validate()
