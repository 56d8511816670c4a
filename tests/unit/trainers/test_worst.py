"""The worst of several errors is NaN wherever a NaN stands (Python's max keeps a NaN only when it comes first)."""
import math

import pytest

from trainers.worst import differs, worst, worst_key

NAN = float("nan")
POSITIONS = {"first": [NAN, 0.001, 0.002], "middle": [0.001, NAN, 0.002], "last": [0.001, 0.002, NAN]}


@pytest.mark.parametrize("position", sorted(POSITIONS))
def test_a_nan_in_any_position_is_the_worst(position):
    values = POSITIONS[position]
    assert math.isnan(worst(values))
    errors = dict(zip("abc", values))
    assert math.isnan(errors[worst_key(errors)])
    assert worst([v for v in values if v == v]) == 0.002 and worst([1.0, math.inf]) == math.inf


def test_no_values_needs_a_default():
    assert worst([], default=0.0) == 0.0
    with pytest.raises(ValueError):
        worst([])
    with pytest.raises(ValueError):
        worst_key({})


def test_nan_is_a_difference():
    assert differs(NAN) and differs(1e-30) and differs(-math.inf) and not differs(0.0) and not differs(-0.0)
