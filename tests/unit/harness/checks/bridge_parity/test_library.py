"""The measurements Megatron-Bridge's ranks merge: a NaN (in any position) is the worst gradient error and a
difference from the project mapping, and a non-finite gradient is named."""
import math

import pytest

torch = pytest.importorskip("torch")

from harness.checks.bridge_parity import library  # noqa: E402

NAN = float("nan")


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_nan_gradient_error_in_any_position_is_the_worst(where):
    names = ["decoder.layers.0.a", "decoder.layers.1.b", "decoder.layers.2.c"]
    rank = {name: (0.001 * (i + 1), 1.0, True) for i, name in enumerate(names)}
    rank[names[where]] = (NAN, 1.0, False)
    found = library.gradient_errors([rank, dict(rank)])
    assert math.isnan(found["max_rel_grad_error"]) and found["worst_grad"] == names[where]
    assert found["nonfinite_grads"] == [names[where]] and found["grads_compared"] == 3


def test_a_shard_s_nan_on_another_rank_is_the_worst():
    mine = {"w": (0.001, 1.0, True), "v": (0.002, 1.0, True)}
    theirs = {"w": (0.001, 1.0, True), "v": (NAN, NAN, False)}
    found = library.gradient_errors([mine, theirs])
    assert math.isnan(found["max_rel_grad_error"]) and found["worst_grad"] == "v" and found["nonfinite_grads"] == ["v"]


@pytest.mark.parametrize("where", [0, 3, 7])
def test_a_nan_in_a_project_tensor_is_a_difference(where):
    project = torch.arange(8, dtype=torch.float32)
    planted = project.clone()
    planted[where] = NAN
    assert library.project_difference(project, project.clone(), 0.0) == 0.0
    assert math.isnan(library.project_difference(planted, project, 0.0))
    assert library.project_difference(project, project - 1.0, 1.0) == 0.0  # a zero-centred norm's offset
    assert library.project_difference(project, project[:4], 0.0) == math.inf
