"""The verdicts of a fully-async run, from its metrics records alone (pure: tests call them).

What they can see: each record's `weight_version` is the published version whose fingerprint matched the
fingerprint of the weights the engine held when it generated the batch (trainers/rollout/fingerprint.py:
every tensor of the Hugging Face engine; the final norm weight in vLLM's workers), the oldest over ranks.
A record without that fingerprint, or whose fingerprint matched no published version or several, cannot
say how old its sample was, and both verdicts below fail on it.
- bounded: every update ran on a sample whose engine held weights at most K versions old. The queue's
  deepest point is shown against its capacity too, but the queue enforces that capacity itself, so that
  part cannot fail short of a broken queue;
- schedule: the observed staleness of every update equals the configured rule, min(step, K) (a run
  that ignored staleness, e.g. a producer that loads the newest weights, is synchronous: its curve
  can lie inside the staleness-K band, so only this verdict tells it apart; a sync that loads nothing
  leaves the engine on version 0 and fails both);
- correction: with K > 0, every update on a stale sample applied the truncated importance-sampling
  correction (its statistics are in the record) and the ratio pi_old / pi_behaviour it applied moved
  away from 1 on at least one stale update (a correction fed the trainer's own log-probs is always 1).
The importance-sampling statistics are in the correction verdict's message and metrics, for the report.
"""
from __future__ import annotations

import math

from harness.results.records import Status, Verdict
from trainers.worst import worst

# A stale sample's largest ratio must exceed 1 by more than this on some update: engine and trainer
# log-probs of the same weights agree to about 1e-5 on CPU (logprob_diff_max), one update moves them by more.
MIN_RATIO_SHIFT = 1e-3
CORRECTION_KEYS = ("is_ratio_mean", "is_ratio_max", "is_truncated_fraction", "is_weight_mean")


def expected_staleness(step: int, limit: int) -> int:
    """The staleness rule (trainers.fully_async.producer.behaviour_version): batch i lags min(i, K) versions."""
    return min(step, limit)


def _unread(records: list[dict]) -> str | None:
    """Why some update's sample age is unknown (None: every record says which version its engine held)."""
    if not records or any("staleness" not in r for r in records):
        return "the run recorded no staleness: it did not run fully-async"
    if any(not r.get("weight_fingerprint") for r in records):
        return "the run recorded no fingerprint of the weights its engine held: the sample ages are unknown"
    unmatched = [r for r in records if r.get("weight_version") is None]
    if unmatched:
        steps = [int(r["step"]) for r in unmatched]
        several = [int(r["step"]) for r in unmatched if len(r.get("weight_versions_matched") or ()) > 1]
        what = (f"matched several published versions at steps {several[:8]} (which one it held cannot be told)"
                if several else f"matched no published version at steps {steps[:8]}")
        return f"the engine's weights {what}: those samples' ages are unknown"
    return None


def bounded_verdict(records: list[dict], limit: int) -> Verdict:
    problem = _unread(records)
    if problem:
        return Verdict("bounded", Status.FAIL, problem)
    ages = [int(r["step"]) - int(r["weight_version"]) for r in records]  # from what the engine held
    worst = max(ages)
    depth, capacity = max(int(r["queue_max_depth"]) for r in records), min(int(r["queue_capacity"]) for r in records)
    ok = worst <= limit and depth <= capacity
    old = [int(r["step"]) for r, age in zip(records, ages) if age > limit]
    message = (f"engine held weights at most {worst} versions old (limit {limit}; from its weights' fingerprint)"
               + (f", older at steps {old[:8]}" if old else "")
               + f"; queue depth at most {depth} (capacity {capacity})")
    return Verdict("bounded", Status.PASS if ok else Status.FAIL, message, metrics={"ages": ages})


def _distribution(ages: list[int]) -> dict[str, int]:
    return {str(age): ages.count(age) for age in sorted(set(ages))}


def schedule_verdict(records: list[dict], limit: int) -> Verdict:
    problem = _unread(records)
    if problem:
        return Verdict("schedule", Status.FAIL, problem)
    observed = [int(r["step"]) - int(r["weight_version"]) for r in records]
    expected = [expected_staleness(int(r["step"]), limit) for r in records]
    wrong = [int(r["step"]) for r, got, want in zip(records, observed, expected) if got != want]
    seen, want = _distribution(observed), _distribution(expected)
    message = f"observed staleness {seen} vs configured {want} (staleness {limit})"
    if wrong:
        message += f"; differs at steps {wrong[:8]}{' ...' if len(wrong) > 8 else ''}"
    return Verdict("schedule", Status.FAIL if wrong else Status.PASS, message,
                   metrics={"observed": seen, "configured": want})


def correction_stats(records: list[dict]) -> dict:
    """The importance-sampling statistics over the updates on stale samples."""
    stale = [r for r in records if (r.get("staleness") or 0) > 0]  # None: unknown, failed by bounded
    applied = [r for r in stale if all(k in r for k in CORRECTION_KEYS)]
    out = {"stale_updates": len(stale), "corrected_updates": len(applied),
           "uncorrected_steps": [int(r["step"]) for r in stale if r not in applied]}
    if applied:
        out.update(ratio_mean=sum(float(r["is_ratio_mean"]) for r in applied) / len(applied),
                   ratio_max=worst(float(r["is_ratio_max"]) for r in applied),
                   clipped_fraction=sum(float(r["is_truncated_fraction"]) for r in applied) / len(applied),
                   weight_mean=sum(float(r["is_weight_mean"]) for r in applied) / len(applied),
                   tis_cap=records[-1].get("tis_cap"))
    return out


def correction_verdict(records: list[dict], limit: int) -> Verdict:
    if limit == 0:
        return Verdict("correction", Status.SKIP, "staleness 0: no stale sample to correct")
    stats = correction_stats(records)
    if not stats["stale_updates"]:
        return Verdict("correction", Status.FAIL, "no update ran on a stale sample: the correction was never used",
                       metrics=stats)
    if stats["uncorrected_steps"]:
        return Verdict("correction", Status.FAIL,
                       f"no importance-sampling statistics at stale steps {stats['uncorrected_steps'][:8]}: "
                       "the correction was not applied", metrics=stats)
    message = (f"TIS on {stats['stale_updates']} stale updates: ratio mean {stats['ratio_mean']:.4f}, "
               f"max {stats['ratio_max']:.4f}, clipped fraction {stats['clipped_fraction']:.2%} "
               f"(cap {stats['tis_cap']})")
    if math.isnan(stats["ratio_max"]):
        return Verdict("correction", Status.FAIL, f"{message}: a ratio was NaN", metrics=stats)
    if stats["ratio_max"] - 1.0 <= MIN_RATIO_SHIFT:
        return Verdict("correction", Status.FAIL, f"{message}: the ratio never left 1 (by more than "
                       f"{MIN_RATIO_SHIFT}), so the correction saw no stale weights", metrics=stats)
    return Verdict("correction", Status.PASS, message, metrics=stats)


def verdicts(records: list[dict], limit: int) -> list[Verdict]:
    return [bounded_verdict(records, limit), schedule_verdict(records, limit), correction_verdict(records, limit)]
