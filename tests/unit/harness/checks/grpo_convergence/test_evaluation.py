"""grpo-convergence's verdicts: the reference passes, a shifted reference and a flat curve fail, a run that
is not comparable skips the band, and fully-async runs combine into one result."""
import copy
import json

from harness.checks.grpo_convergence import evaluation as check
from harness.checks.grpo_convergence.references import reference_path
from harness.results.records import Status

REFERENCE = json.loads(reference_path("fsdp", "text").read_text())


def _records(curve):
    return [{"step": i, "reward_mean": v} for i, v in enumerate(curve)]

def test_evaluate_passes_the_reference_and_fails_a_shifted_one():
    status, _, metrics, verdicts = check.evaluate(_records(REFERENCE["curve"]), REFERENCE)
    assert status is Status.PASS and metrics["max_deviation"] == 0.0
    shifted = copy.deepcopy(REFERENCE)
    shifted["curve"] = [v + 1.5 * REFERENCE["band"] for v in REFERENCE["curve"]]
    status, _, metrics, verdicts = check.evaluate(_records(REFERENCE["curve"]), shifted)
    assert status is Status.FAIL
    assert {v.name: v.status for v in verdicts}["band"] is Status.FAIL

def test_evaluate_fails_a_flat_curve_and_skips_the_band_when_not_comparable():
    flat = _records([REFERENCE["curve"][0]] * REFERENCE["steps"])
    status, _, _, verdicts = check.evaluate(flat, REFERENCE)
    by_name = {v.name: v.status for v in verdicts}
    assert status is Status.FAIL and by_name == {"threshold": Status.FAIL, "gain": Status.FAIL, "band": Status.FAIL}
    _, _, _, verdicts = check.evaluate(flat, REFERENCE, comparable=False)
    assert {v.name: v.status for v in verdicts}["band"] is Status.SKIP

def test_moving_average():
    assert check.moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]

def test_fully_async_results_combine_with_prefixed_verdicts():
    from harness.results.records import CheckResult, Verdict

    good = CheckResult(check.NAME, Status.PASS, "ok", verdicts=[Verdict("band", Status.PASS, "in")])
    bad = CheckResult(check.NAME, Status.FAIL, "stale", verdicts=[Verdict("bounded", Status.FAIL, "3 > 2")])
    combined = check.combine([(1, good), (2, bad)])
    assert combined.status is Status.FAIL
    assert [v.name for v in combined.verdicts] == ["staleness1/band", "staleness2/bounded"]
    assert reference_path("fsdp", "text", 2).name == "grpo_fsdp_text_async2.json"


def test_a_nan_reward_in_any_position_fails_the_band_at_its_step():
    steps = len(REFERENCE["curve"])
    for where in (0, steps // 2, steps - 1):
        curve = list(REFERENCE["curve"])
        curve[where] = float("nan")
        _, _, metrics, verdicts = check.evaluate(_records(curve), REFERENCE)
        assert {v.name: v.status for v in verdicts}["band"] is Status.FAIL, where
        assert metrics["worst_step"] == where
