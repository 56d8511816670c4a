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
