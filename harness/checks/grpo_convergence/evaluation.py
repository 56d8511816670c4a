"""A grpo-convergence run's verdicts against its reference, from its per-step metrics records (pure: tests call it).

- threshold: the final reward (mean of the last `final_window` steps) exceeds `threshold`;
- gain: final minus initial reward (mean of the first `initial_window` steps) >= `margin`;
- band: the reward curve, smoothed by a moving average of `smooth` steps, stays within `band` of the smoothed
  reference curve at every step (only when seed, steps and model config match the reference's, otherwise `skip`).
A fully-async run adds the verdicts of async_verdicts (bounded, schedule, correction) and its staleness and
importance-sampling statistics; the fully-async runs of one cell (one per staleness bound) combine into one result.
"""
from __future__ import annotations

from harness.checks.grpo_convergence import async_verdicts
from harness.results.records import CheckResult, Status, Verdict
from trainers.worst import worst_key

NAME = "grpo-convergence"


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to `window` steps (the first steps average what exists)."""
    out = []
    for index in range(len(values)):
        part = values[max(0, index - window + 1): index + 1]
        out.append(sum(part) / len(part))
    return out


def evaluate(records: list[dict], reference: dict, comparable: bool = True,
             band_skip: str | None = None) -> tuple[Status, str, dict, list[Verdict]]:
    """The verdicts for a run's per-step records against a reference; with `band_skip` (the reference has no
    curve for this run's engine) the band is skipped for that reason."""
    curve = [float(r["reward_mean"]) for r in records]
    ref_curve = [float(v) for v in reference.get("curve", ())]
    final_window, initial_window = int(reference["final_window"]), int(reference["initial_window"])
    final = sum(curve[-final_window:]) / len(curve[-final_window:])
    initial = sum(curve[:initial_window]) / len(curve[:initial_window])
    gain = final - initial
    smooth = int(reference["smooth"])
    run_smooth, ref_smooth = moving_average(curve, smooth), moving_average(ref_curve, smooth)
    deviations = [abs(a - b) for a, b in zip(run_smooth, ref_smooth)]
    worst_step = worst_key(dict(enumerate(deviations))) if deviations else None  # a NaN step is the worst
    max_deviation = deviations[worst_step] if deviations else float("nan")
    metrics = {"reward_curve": curve, "reference_curve": ref_curve, "band": reference["band"],
               "smooth": smooth, "final_reward": final, "initial_reward": initial, "gain": gain,
               "max_deviation": max_deviation, "worst_step": worst_step, "steps": len(curve),
               "threshold": reference["threshold"], "margin": reference["margin"], "per_step": records}
    verdicts = [
        Verdict("threshold", Status.PASS if final > reference["threshold"] else Status.FAIL,
                f"final reward {final:.3f} vs threshold {reference['threshold']}"),
        Verdict("gain", Status.PASS if gain >= reference["margin"] else Status.FAIL,
                f"gain {gain:.3f} ({initial:.3f} -> {final:.3f}) vs margin {reference['margin']}"),
    ]
    if band_skip:
        verdicts.append(Verdict("band", Status.SKIP, band_skip))
    elif not comparable or len(curve) != len(ref_curve):
        verdicts.append(Verdict("band", Status.SKIP, "seed, steps or model config differ from the reference's"))
    else:
        inside = max_deviation <= reference["band"]
        verdicts.append(Verdict("band", Status.PASS if inside else Status.FAIL,
                                f"max deviation {max_deviation:.3f} at step {worst_step} "
                                f"(moving average of {smooth}) vs band {reference['band']}"))
    failed = [v for v in verdicts if v.status is Status.FAIL]
    status = Status.FAIL if failed else Status.PASS
    message = "; ".join(v.message for v in (failed or verdicts))
    return status, message, metrics, verdicts


def add_fully_async(records: list[dict], staleness: int, status: Status, message: str, metrics: dict,
                    verdicts: list[Verdict]) -> tuple[Status, str]:
    """A fully-async run's verdicts appended to `verdicts` and its statistics to `metrics`; (status, message)."""
    from trainers.fully_async.driver import staleness_distribution

    extra = async_verdicts.verdicts(records, staleness)
    verdicts += extra
    failed = [v for v in extra if v.status is Status.FAIL]
    if failed:
        status, message = Status.FAIL, "; ".join([v.message for v in failed] + [message])
    else:  # the report's line shows the check's message: the importance-sampling statistics go in it
        message = f"{message}; {extra[-1].message}"
    metrics["importance_sampling"] = async_verdicts.correction_stats(records)
    metrics["staleness_distribution"] = staleness_distribution(records)
    last = records[-1]
    metrics.update({k: last.get(k) for k in ("overlap_fraction", "rollout_busy_fraction", "update_busy_fraction")})
    return status, message


def combine(runs: list[tuple[int, CheckResult]]) -> CheckResult:
    """One result for the fully-async runs: their verdicts prefixed `staleness<K>/`, the worst status."""
    verdicts, metrics, messages = [], {"mode": "fully-async"}, []
    for k, result in runs:
        verdicts += [Verdict(f"staleness{k}/{v.name}", v.status, v.message) for v in result.verdicts]
        metrics[f"staleness{k}"] = result.metrics
        messages.append(f"staleness {k}: {result.status.value}: {result.message}")
    order = (Status.TIMEOUT, Status.FAIL, Status.PASS, Status.SKIP)
    status = next((s for s in order if any(r.status is s for _, r in runs)), runs[0][1].status)
    return CheckResult(NAME, status, "; ".join(messages), metrics=metrics, verdicts=verdicts, log=runs[0][1].log)
