"""The estimate's validation (`python -m harness.plans.validate`) refuses sizes below 1."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("option", ["--hidden", "--layers", "--batch", "--length"])
def test_the_estimate_validation_refuses_sizes_below_1(capsys, option):
    from harness.plans import validate

    with pytest.raises(SystemExit) as info:
        validate.main([option, "0"])
    assert info.value.code == 2
    assert f"{option}: expected a whole number of at least 1, got 0" in capsys.readouterr().err
