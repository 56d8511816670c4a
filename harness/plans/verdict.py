"""One verdict per plan: the start-up rules, then memory per device, each reason one line.

A plan `would start` when no rule fails and the estimate fits the device; `would not start` when
one fails; a rule that could not be asked of this environment is listed as unchecked (never as
passed), and a plan whose only open points are unchecked is `unchecked`, not a pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import megatron_probe, rules
from .memory import GIB, ConservationError, MemoryUnavailable, fsdp_estimate, megatron_estimate
from .plan_format import Plan
from .rules import FAIL, OK, UNCHECKED, Finding

START, NO_START, OPEN = "would start", "would not start", "unchecked"


@dataclass
class PlanVerdict:
    plan: Plan
    findings: list[Finding] = field(default_factory=list)
    memory_gib: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        statuses = {f.status for f in self.findings}
        return NO_START if FAIL in statuses else OPEN if UNCHECKED in statuses else START

    @property
    def stale_expect(self) -> bool:
        """Declared not to start ([expect] starts = false), yet it would start here: the declaration is stale."""
        return not self.plan.expect_starts and self.verdict == START

    def lines(self) -> list[str]:
        head = f"{self.plan.path.name}: {self.verdict} ({self.plan.name}; {self.plan.world_size} x {self.plan.device})"
        stale = [f"  stale     expect.starts: declared false ({self.plan.expect_reason}), but it would start here: "
                 "the declaration is stale"] if self.stale_expect else []
        return [head] + [f"  {f.line()}" for f in self.findings] + stale

    def to_dict(self) -> dict:
        return {"plan": self.plan.path.name, "name": self.plan.name, "verdict": self.verdict,
                "stale_expect": self.stale_expect,
                "memory_gib": self.memory_gib,
                "findings": [{"field": f.field, "status": f.status, "message": f.message, "source": f.source}
                             for f in self.findings]}


def memory_finding(plan: Plan) -> tuple[Finding, dict[str, float]]:
    """Memory per device against the plan's device memory (cluster.memory_gib)."""
    try:
        if plan.backend == "fsdp":
            estimate = fsdp_estimate(plan)
        else:
            if megatron_probe.version() is None:
                return Finding("cluster.memory_gib", UNCHECKED, "megatron-core not installed: Megatron's layout "
                               "(stages, data-parallel groups) not available"), {}
            stages = megatron_probe.layers_per_stage(plan)
            groups = megatron_probe.world_layout(plan)
            estimate = megatron_estimate(plan, stages, groups["dp"], groups["expert_dp"])
    except MemoryUnavailable as exc:
        return Finding("cluster.memory_gib", UNCHECKED, str(exc)), {}
    except ConservationError as exc:  # the estimate is wrong, so a "fits" would be a guess: say it, as a failure
        return Finding("cluster.memory_gib", FAIL, f"the memory estimate does not add up: {exc}"), {}
    except (AssertionError, ValueError, RuntimeError) as exc:
        return Finding("cluster.memory_gib", UNCHECKED, f"no layout to count ({type(exc).__name__}: {exc})"), {}
    gib = estimate.gib()
    parts = ", ".join(f"{k} {v:g}" for k, v in gib.items() if k != "total")
    fits = estimate.total <= plan.memory_gib * GIB
    message = (f"{gib['total']:g} GiB per device ({parts}; {estimate.note}) "
               f"{'fits in' if fits else 'exceeds'} {plan.memory_gib:g} GiB")
    source = "counted on the real modules (meta device)"
    return Finding("cluster.memory_gib", OK if fits else FAIL, message, source), gib


def evaluate(plan: Plan) -> PlanVerdict:
    found = rules.check(plan)
    verdict = PlanVerdict(plan, found)
    if not any(f.status == FAIL for f in found):
        finding, gib = memory_finding(plan)
        verdict.findings.append(finding)
        verdict.memory_gib = gib
    else:
        verdict.findings.append(Finding("cluster.memory_gib", UNCHECKED,
                                        "not estimated: the plan fails a start-up rule"))
    return verdict
