"""One verdict per plan: the start-up rules, then memory per device, each reason one line; and the `plan` verb.

A plan `would start` when no rule fails and the estimate fits the device; `would not start` when
one fails; a rule that could not be asked of this environment is listed as unchecked (never as
passed), and a plan whose only open points are unchecked is `unchecked`, not a pass. A memory estimate
that raises (anything but "this environment cannot build the model") is an `error` naming the exception:
the harness failed to judge the plan, which is neither a pass nor a question this environment cannot answer.

`python -m harness plan FILE...` prints a verdict per launch plan, one line per reason. Exit status: 0 when
every plan would start, 1 when one would not (or is unchecked or an error somewhere) or one that would start declares
`[expect] starts = false` (a stale declaration, said on its own line), 2 for a plan file that is not valid
(InputError), 3 without torch here. `--json` prints JSON.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EnvironmentMissing, InputError
from . import megatron_probe, rules
from .memory import GIB, ConservationError, MemoryUnavailable, fsdp_estimate, megatron_estimate
from .plan_format import Plan, load_plan
from .rules import FAIL, OK, UNCHECKED, Finding

START, NO_START, OPEN, BROKEN = "would start", "would not start", "unchecked", "error"
ERROR = "error"  # a finding the harness could not produce: its estimate raised


@dataclass
class PlanVerdict:
    plan: Plan
    findings: list[Finding] = field(default_factory=list)
    memory_gib: dict[str, float] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        statuses = {f.status for f in self.findings}
        return NO_START if FAIL in statuses else BROKEN if ERROR in statuses else OPEN if UNCHECKED in statuses \
            else START

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
    except Exception as exc:  # noqa: BLE001 - the estimate itself broke: an error naming it, never "unchecked"
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return Finding("cluster.memory_gib", ERROR, f"the memory estimate raised {what}"), {}
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


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="check launch plans (plans/*.toml) against this environment's versions")
    plan.add_argument("files", type=Path, nargs="+", metavar="FILE")
    plan.add_argument("--json", action="store_true")


def cmd_plan(args) -> int:
    """The `plan` verb: every file loaded and validated, then each plan's verdict printed (or --json)."""
    plans = [load_plan(path) for path in args.files]  # every file validated before any is evaluated
    names = [p.path.resolve() for p in plans]
    if len(set(names)) != len(names):
        raise InputError("plan: the same file is named twice")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import torch
    except ImportError:
        raise EnvironmentMissing("plan: needs torch in this environment (and megatron-core for Megatron "
                                 "plans); run it in a cell's environment or `nox -s tests`'s") from None

    torch.set_num_threads(1)
    # megatron-core warns on import that Transformer Engine and Apex are absent: true, and beside the point
    warnings.filterwarnings("ignore", module=r"megatron\.")
    verdicts = [evaluate(plan) for plan in plans]
    if args.json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1))
    else:
        for verdict in verdicts:
            print("\n".join(verdict.lines()))
    sys.stdout.flush()
    return 0 if all(v.verdict == START and not v.stale_expect for v in verdicts) else 1
