"""patch-parity's gradient comparison: a NaN gradient in any position is the worst error, and fails a tolerance."""
import math

import pytest

torch = pytest.importorskip("torch")

from harness.checks.patch_parity.inputs import grad_error  # noqa: E402


@pytest.mark.parametrize("where", ["a", "b", "c"])
def test_a_nan_gradient_in_any_position_is_the_worst(where):
    stock = {name: torch.full((3,), 1.0) for name in "abc"}
    patched = {name: torch.full((3,), 1.0 + 0.001 * (i + 1)) for i, name in enumerate("abc")}
    patched[where] = patched[where].clone()
    patched[where][1] = float("nan")
    error, name = grad_error(stock, patched)
    assert math.isnan(error) and name == where
    assert not error <= 1e-2  # the tolerance test every caller makes fails


def test_finite_gradients_give_the_largest_relative_error_and_a_missing_one_is_infinite():
    stock = {"a": torch.ones(2), "b": torch.full((2,), 2.0)}
    error, name = grad_error(stock, {"a": torch.ones(2), "b": torch.full((2,), 2.5)})
    assert (round(error, 6), name) == (0.25, "b")
    assert grad_error(stock, {"a": None, "b": stock["b"]})[0] == math.inf
    assert grad_error({"a": None}, {"a": None}) == (0.0, "")


def test_the_models_have_one_layer_of_each_kind_and_a_given_config_is_used_as_given():
    """patch-parity builds every kind at ONE_OF_EACH (one Gated DeltaNet, one full attention) unless its
    --model-config gives that kind's config, which is then merged on the zoo's as given."""
    from qwen35_helpers import qwen35_or_skip

    from harness.checks.patch_parity.inputs import Models, parity_overrides, text_config
    from trainers.models import ONE_OF_EACH

    qwen35_or_skip()
    models = Models(0)
    for kind in ("text", "vl", "moe"):
        config = text_config(models.get(kind))
        assert (config.num_hidden_layers, config.layer_types) == (2, ONE_OF_EACH["layer_types"]), kind
    given = {"num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    overrides = parity_overrides({"text": given})
    assert overrides["text"] == given and overrides["moe"] == ONE_OF_EACH
    assert text_config(Models(0, {"text": given}).get("text")).num_hidden_layers == 4
