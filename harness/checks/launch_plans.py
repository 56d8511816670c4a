"""launch-plans: would the shipped launch plans (plans/*.toml) start on this cell's versions?

One sub-verdict per plan: pass (would start), fail (would not start, with every reason), xfail (would
not start, as the plan file's `[expect]` declares, with its reason), skip (a rule this environment cannot
answer, e.g. no megatron-core in an FSDP cell; the reason says which), error (its memory estimate raised:
the exception is named). The check fails when a plan's
verdict here differs from what its file expects: a plan that stops starting on this stack, or a declared
failure that no longer happens (stale). It is a skip when no plan could be answered at all.
In a row that installs verl, `verl:plan/<script>` verdicts judge verl's own Qwen3.5 example scripts of that release
(support/verl_plans.py); one that fails fails the check.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.results.records import CheckResult, Status, Verdict

from . import CheckOptions
from .support import verl, verl_plans

NAME = "launch-plans"
PLANS_DIR = Path(__file__).resolve().parents[2] / "plans"


def plan_files() -> list[Path]:
    """The plans to check: HARNESS_PLANS (os.pathsep-separated files) or every plans/*.toml."""
    chosen = os.environ.get("HARNESS_PLANS")
    if chosen:
        return [Path(p) for p in chosen.split(os.pathsep) if p]
    return sorted(PLANS_DIR.glob("*.toml"))


def _reasons(verdict) -> str:
    wanted = {"would not start": "fail", "error": "error"}.get(verdict.verdict, "unchecked")
    return "; ".join(f"{f.field}: {f.message}" for f in verdict.findings if f.status == wanted)


def _judge(plan, verdict: str, reasons: str) -> tuple[Status, str]:
    """A plan's sub-verdict: its verdict here against what its file expects."""
    if verdict == "unchecked":
        return Status.SKIP, f"unchecked: {reasons}"
    if verdict == "error":
        return Status.ERROR, f"could not be judged: {reasons}"
    starts = verdict == "would start"
    if starts == plan.expect_starts:
        if starts:
            return Status.PASS, "would start"
        return Status.XFAIL, f"would not start, as declared ({plan.expect_reason}): {reasons}"
    if starts:
        return Status.FAIL, (f"would start, but plans/{plan.path.name} declares it would not "
                             f"({plan.expect_reason}): the declaration is stale")
    return Status.FAIL, f"would not start: {reasons}"


def run(options: CheckOptions) -> CheckResult:
    result = shipped_plans()
    if verl.installed():  # a verl row: verl's own Qwen3.5 example scripts of that release too
        result = verl_plans.add(result, verl.guarded("plans", verl_plans.verdicts))
    return result


def shipped_plans() -> CheckResult:
    from harness.plans.plan_format import load_plan
    from harness.plans.verdict import evaluate
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    verdicts = []
    for path in plan_files():
        plan = load_plan(path)
        result = evaluate(plan)
        status, message = _judge(plan, result.verdict, _reasons(result))
        verdicts.append(Verdict(path.stem, status, message,
                                metrics={"memory_gib": result.memory_gib, "world_size": result.plan.world_size}))
    if not verdicts:
        return CheckResult(NAME, Status.ERROR, f"no plan files in {PLANS_DIR.name}/")
    starting = [v.name for v in verdicts if v.status is Status.PASS]
    failing = [v.name for v in verdicts if v.status is Status.FAIL]
    expected = [v.name for v in verdicts if v.status is Status.XFAIL]
    summary = f"{len(starting)} of {len(verdicts)} plans would start"
    metrics = {"would_start": starting, "unexpected": failing, "would_not_start_as_declared": expected,
               "unchecked": [v.name for v in verdicts if v.status is Status.SKIP]}
    if failing:
        return CheckResult(NAME, Status.FAIL, f"{summary}; not as their plan files expect: {', '.join(failing)}",
                           metrics=metrics, verdicts=verdicts)
    broken = [v for v in verdicts if v.status is Status.ERROR]
    if broken:
        return CheckResult(NAME, Status.ERROR, f"{summary}; " + "; ".join(f"{v.name}: {v.message}" for v in broken),
                           metrics=metrics, verdicts=verdicts)
    if expected:
        summary += f"; would not start, as declared: {', '.join(expected)}"
    if metrics["unchecked"]:
        summary += f"; unchecked here: {', '.join(metrics['unchecked'])}"
    status = Status.PASS if starting or expected else Status.SKIP  # nothing answerable here is not a pass
    return CheckResult(NAME, status, summary, metrics=metrics, verdicts=verdicts)
