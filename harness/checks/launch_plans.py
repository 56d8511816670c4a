"""launch-plans: would the shipped launch plans (plans/*.toml) start on this cell's versions?

One sub-verdict per plan: pass (would start), fail (would not start, with every reason), skip
(a rule this environment cannot answer, e.g. no megatron-core in an FSDP cell; the reason says
which). The check fails when a plan would not start here, so the table shows, per stack, which
seed plans would start and why not; it is a skip when no plan could be answered at all.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.results.records import CheckResult, Status, Verdict

from . import CheckOptions

NAME = "launch-plans"
PLANS_DIR = Path(__file__).resolve().parents[2] / "plans"
_STATUS = {"would start": Status.PASS, "would not start": Status.FAIL, "unchecked": Status.SKIP}


def plan_files() -> list[Path]:
    """The plans to check: HARNESS_PLANS (os.pathsep-separated files) or every plans/*.toml."""
    chosen = os.environ.get("HARNESS_PLANS")
    if chosen:
        return [Path(p) for p in chosen.split(os.pathsep) if p]
    return sorted(PLANS_DIR.glob("*.toml"))


def _reasons(verdict) -> str:
    wanted = "fail" if verdict.verdict == "would not start" else "unchecked"
    return "; ".join(f"{f.field}: {f.message}" for f in verdict.findings if f.status == wanted)


def run(options: CheckOptions) -> CheckResult:
    from harness.plans.plan_format import load_plan
    from harness.plans.verdict import evaluate
    from trainers.device import set_cpu_threads

    set_cpu_threads()
    verdicts = []
    for path in plan_files():
        result = evaluate(load_plan(path))
        message = "would start" if result.verdict == "would start" else f"{result.verdict}: {_reasons(result)}"
        verdicts.append(Verdict(path.stem, _STATUS[result.verdict], message,
                                metrics={"memory_gib": result.memory_gib, "world_size": result.plan.world_size}))
    if not verdicts:
        return CheckResult(NAME, Status.ERROR, f"no plan files in {PLANS_DIR.name}/")
    starting = [v.name for v in verdicts if v.status is Status.PASS]
    failing = [v.name for v in verdicts if v.status is Status.FAIL]
    summary = f"{len(starting)} of {len(verdicts)} plans would start"
    metrics = {"would_start": starting, "would_not_start": failing,
               "unchecked": [v.name for v in verdicts if v.status is Status.SKIP]}
    if failing:
        return CheckResult(NAME, Status.FAIL, f"{summary}; would not start: {', '.join(failing)}", metrics=metrics,
                           verdicts=verdicts)
    if metrics["unchecked"]:
        summary += f"; unchecked here: {', '.join(metrics['unchecked'])}"
    status = Status.PASS if starting else Status.SKIP  # nothing answerable here is not a pass
    return CheckResult(NAME, status, summary, metrics=metrics, verdicts=verdicts)
