"""The project mapping's gradient comparison: a NaN error in any position is the worst, overall and over the GDN
parameters, and the parameters with a non-finite gradient are kept."""
import math

import pytest

from harness.checks import bridge_parity
from harness.checks.bridge_parity.project_bridge import gradient_summary
from harness.results.records import Status

NAN = float("nan")
NAMES = ["model.layers.0.linear_attn.A_log", "model.layers.0.linear_attn.dt_bias", "lm_head.weight"]


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_nan_in_any_position_is_the_worst_gradient_error(where):
    errors = {name: 0.001 * (i + 1) for i, name in enumerate(NAMES)}
    errors[NAMES[where]] = NAN
    found = gradient_summary(errors, [NAMES[where]])
    assert math.isnan(found["max_rel_grad_error"]) and found["worst_grad"] == NAMES[where]
    assert (where == 2) != math.isnan(found["max_rel_grad_error_gdn"])  # lm_head is not a GDN parameter
    verdict = bridge_parity.parity_verdict("text-hybrid-tp1", {
        "tp": 1, "ep": 1, "bridge": "project-mapping", "max_abs_logprob_error": 1e-6, "finite": True,
        "roundtrip_exact": True, "roundtrip_mismatched": [], **found}, None)
    assert verdict.status == Status.FAIL and "non-finite gradients" in verdict.message


def test_finite_errors_pick_the_largest():
    found = gradient_summary({name: 0.001 * (i + 1) for i, name in enumerate(NAMES)}, [])
    assert (found["worst_grad"], found["max_rel_grad_error_gdn"], found["nonfinite_grads"]) == (NAMES[2], 0.002, [])
