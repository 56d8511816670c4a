"""The fully-async verdicts of grpo-convergence fail on the runs they exist for: a sample whose engine
held older weights than allowed, a run that ignored staleness, a run with the correction switched off, and a
run whose records cannot say which weights the engine held. (The real driver's records with a sync that does
nothing: tests/e2e/test_fully_async_run.py.)"""
from harness.checks.grpo_convergence import async_verdicts as av
from harness.results.records import Status


def _run(limit, steps=6, loaded=None, correction=True, ratio_max=1.2):
    """Records as the fully-async driver writes them; `loaded`: the version each step's engine held."""
    records = []
    for step in range(steps):
        version = loaded[step] if loaded is not None else step - av.expected_staleness(step, limit)
        record = {"step": step, "reward_mean": 0.5, "staleness": step - version, "weight_version": version,
                  "weight_versions_matched": [version], "weight_fingerprint": f"fp{version}",
                  "queue_max_depth": 1, "queue_capacity": max(1, limit), "tis_cap": 2.0}
        if correction:
            record.update(is_ratio_mean=0.99, is_ratio_max=ratio_max if step - version else 1.0,
                          is_truncated_fraction=0.01, is_weight_mean=0.98)
        records.append(record)
    return records


def _statuses(records, limit):
    return {v.name: v.status for v in av.verdicts(records, limit)}


def test_a_run_that_follows_the_schedule_passes_every_verdict():
    for limit in (1, 2):
        assert set(_statuses(_run(limit), limit).values()) == {Status.PASS}
    assert _statuses(_run(0), 0) == {"bounded": Status.PASS, "schedule": Status.PASS, "correction": Status.SKIP}


def test_bounded_is_judged_from_the_held_version():
    # the schedule asked for version step-1, but the engine still held version 0 at step 3: 3 versions old
    records = _run(1, loaded=[0, 0, 1, 0, 3, 4])
    verdict = av.bounded_verdict(records, 1)
    assert verdict.status is Status.FAIL and "at most 3 versions old" in verdict.message
    assert "older at steps [3]" in verdict.message


def test_records_that_cannot_say_what_the_engine_held_fail_bounded_and_schedule():
    # a version without the fingerprint it was read from: the version the producer asked for, not what it held
    records = _run(1)
    for record in records:
        del record["weight_fingerprint"]
    for verdict in (av.bounded_verdict(records, 1), av.schedule_verdict(records, 1)):
        assert verdict.status is Status.FAIL and "no fingerprint" in verdict.message
    # the engine's weights matched no published version at step 2, or several at step 4
    records = _run(1)
    records[2].update(weight_version=None, weight_versions_matched=[], staleness=None)
    for verdict in (av.bounded_verdict(records, 1), av.schedule_verdict(records, 1)):
        assert verdict.status is Status.FAIL and "no published version at steps [2]" in verdict.message
    records = _run(1)
    records[4].update(weight_version=None, weight_versions_matched=[2, 3], staleness=None)
    verdict = av.bounded_verdict(records, 1)
    assert verdict.status is Status.FAIL and "several published versions at steps [4]" in verdict.message
    assert av.correction_stats(records)["stale_updates"] == 4  # the unknown age is not counted as stale


def test_a_run_that_ignores_staleness_fails_the_schedule_and_the_correction():
    synchronous = _run(1, loaded=list(range(6)), ratio_max=1.0)  # every sample from the newest weights
    statuses = _statuses(synchronous, 1)
    assert statuses["bounded"] is Status.PASS  # fresher than allowed is within the bound
    assert statuses["schedule"] is Status.FAIL and statuses["correction"] is Status.FAIL
    verdict = av.schedule_verdict(synchronous, 1)
    assert "{'0': 6}" in verdict.message and "{'0': 1, '1': 5}" in verdict.message
    # too stale at staleness 2: loaded one version later than the rule at one step
    assert av.schedule_verdict(_run(2, loaded=[0, 0, 0, 2, 2, 3]), 2).status is Status.FAIL


def test_a_run_with_the_correction_switched_off_fails():
    verdict = av.correction_verdict(_run(1, correction=False), 1)
    assert verdict.status is Status.FAIL and "not applied" in verdict.message
    # the statistics are there but the ratio is 1 everywhere: behaviour log-probs were the trainer's own
    assert av.correction_verdict(_run(1, ratio_max=1.0 + av.MIN_RATIO_SHIFT / 2), 1).status is Status.FAIL


def test_the_correction_verdict_reports_the_statistics():
    verdict = av.correction_verdict(_run(2), 2)
    assert verdict.status is Status.PASS
    assert "ratio mean 0.9900" in verdict.message and "max 1.2000" in verdict.message
    assert "clipped fraction 1.00%" in verdict.message and "cap 2.0" in verdict.message
    assert verdict.metrics["stale_updates"] == 5 and verdict.metrics["ratio_max"] == 1.2


def _records(curve):
    return [{"step": i, "reward_mean": v} for i, v in enumerate(curve)]


def _async_records(staleness, depth=1, capacity=1):
    return [{"step": i, "reward_mean": 0.5, "staleness": s, "weight_version": i - s, "weight_fingerprint": "fp",
             "queue_max_depth": depth, "queue_capacity": capacity} for i, s in enumerate(staleness)]


def test_bounded_verdict_catches_stale_samples_an_overfull_queue_and_a_sync_run():
    assert av.bounded_verdict(_async_records([0, 1, 2, 2]), 2).status is Status.PASS
    assert av.bounded_verdict(_async_records([0, 1, 3]), 2).status is Status.FAIL
    assert av.bounded_verdict(_async_records([0, 1, 1], depth=3, capacity=2), 2).status is Status.FAIL
    assert av.bounded_verdict(_records([0.2, 0.3]), 1).status is Status.FAIL  # ran sync: no staleness


def test_a_nan_ratio_in_any_stale_update_fails_the_correction():
    for where in (1, 3, 5):  # the first, a middle and the last stale update
        records = _run(1)
        records[where]["is_ratio_max"] = float("nan")
        verdict = av.correction_verdict(records, 1)
        assert verdict.status is Status.FAIL and "NaN" in verdict.message, where
