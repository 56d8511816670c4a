"""gate-precision's verdicts, from what `probes` measured per model (plain data: names, dtype strings, numbers).

Per model kind the measurements are {"upstream": run, "trainer": run, "cast": drifts, "load": loaded} with each run
as `probes.sharded_run` returns it; the gates are the parameters named A_log or dt_bias.
"""
from __future__ import annotations

import re
from typing import Any

from harness.results.records import Status, Verdict

GATES = ("A_log", "dt_bias")
FP32 = "float32"
_SEVERITY = (Status.ERROR, Status.FAIL, Status.AFFECTED, Status.PASS)  # the worst model decides a verdict


def pattern(names: list[str]) -> list[str]:
    """Parameter names with their layer numbers folded: model.layers.*.linear_attn.A_log."""
    return sorted({re.sub(r"\.\d+\.", ".*.", name) for name in names})


def gate_names(stored: dict[str, str]) -> list[str]:
    return sorted(name for name in stored if name.rsplit(".", 1)[-1] in GATES)


def fp32_in_forward(run: dict[str, Any]) -> list[str]:
    return pattern([name for name, dtype in run["forward"].items() if dtype == FP32])


def _figures(d: dict[str, float]) -> str:
    return f"max {d['max']:.2e}, mean {d['mean']:.2e}"


def side_status(kind: str, run: dict[str, Any], side: str) -> tuple[Status, str]:
    """One model's status and message for `side` from its sharded run: `upstream` (this check's plain sharding of
    stock code: a gate rounded is a finding, a failure to measure is the harness's), `trainer` (everything wrong
    fails) or `verl` (verl's own wrapping: a gate rounded is a finding, verl's wrapping failing is a failure)."""
    broken = Status.ERROR if side == "upstream" else Status.FAIL
    if "raised" in run:
        return broken, f"{kind}: sharding or the forward raised {run['raised']}"
    gates = gate_names(run["stored"])
    if not run["units"]:
        return broken, f"{kind}: no FSDP2 unit was made, so nothing was measured under the policy"
    if not gates:
        return Status.ERROR, f"{kind}: the model has no A_log or dt_bias parameter (no Gated DeltaNet layer?)"
    unseen = [n for n in gates if n not in run["forward"]]
    if unseen:
        return Status.ERROR, f"{kind}: {', '.join(pattern(unseen))} never seen unsharded in the forward"
    forward = {n: run["forward"][n] for n in gates}
    stored = {n: run["stored"][n] for n in gates}
    low_forward = [n for n, dtype in forward.items() if dtype != FP32]
    low_stored = [n for n, dtype in stored.items() if dtype != FP32]
    drift = f"log-prob drift from float32 {_figures(run['drift'])}"
    if not low_forward and not low_stored:
        return Status.PASS, f"{kind}: A_log and dt_bias float32 as stored and in the forward; {drift}"
    where = []
    if low_stored:
        where.append(f"stored as {sorted({stored[n] for n in low_stored})[0]}: {', '.join(pattern(low_stored))}")
    if low_forward:
        where.append(f"{sorted({forward[n] for n in low_forward})[0]} in the forward: "
                     f"{', '.join(pattern(low_forward))}")
    return Status.FAIL if side == "trainer" else Status.AFFECTED, f"{kind}: {'; '.join(where)}; {drift}"


def run_metrics(run: dict[str, Any]) -> dict[str, Any]:
    """What a verdict keeps of one sharded run."""
    if "raised" in run:
        return {"raised": run["raised"]}
    return {"fp32_in_forward": fp32_in_forward(run), "units": len(run["units"]), "logprob_drift": run["drift"]}


def _verdict(name: str, judged: dict[str, tuple[Status, str]], metrics: dict[str, Any], prefix: str) -> Verdict:
    status = min((s for s, _ in judged.values()), key=_SEVERITY.index, default=Status.ERROR)
    message = prefix + ("; ".join(msg for _, msg in judged.values()) or "no model was measured")
    return Verdict(name, status, message, metrics)


def sharded_verdicts(models: dict[str, dict[str, Any]], policy: str) -> list[Verdict]:
    """`upstream` (stock transformers, plain fully_shard of each block and the root) and `trainer` (the trainer's
    parallelize), both under `policy`; affected / fail where a gate is rounded to bf16."""
    out = []
    for side, how in (("upstream", "stock transformers, fully_shard on each block and the root"),
                      ("trainer", "the trainer's parallelize (trainers/fsdp/parallelize.py)")):
        judged = {kind: side_status(kind, m[side], side) for kind, m in models.items()}
        metrics = {kind: run_metrics(m[side]) for kind, m in models.items()}
        out.append(_verdict(side, judged, metrics, f"{how}, {policy}: "))
    return out


def load_verdict(models: dict[str, dict[str, Any]]) -> Verdict:
    """`upstream/load`: what transformers keeps in float32 when asked to load a checkpoint in bf16."""
    judged, metrics = {}, {}
    for kind, m in models.items():
        load = m["load"]
        declared = ", ".join(f"{attr}={names}" for attr, names in load["declared"].items())
        low = [n for n, dtype in load["gates_after_bf16_load"].items() if dtype != FP32]
        if not load["gates_after_bf16_load"]:
            judged[kind] = (Status.ERROR, f"{kind}: the loaded model has no A_log or dt_bias parameter")
        elif low:
            judged[kind] = (Status.AFFECTED, f"{kind}: {', '.join(pattern(low))} loaded as "
                                             f"{load['gates_after_bf16_load'][low[0]]} (declares {declared})")
        else:
            judged[kind] = (Status.PASS, f"{kind}: A_log and dt_bias stay float32 (declares {declared})")
        metrics[kind] = {"declared": load["declared"], "fp32_after_bf16_load": pattern(load["fp32_after_bf16_load"])}
    return _verdict("upstream/load", judged, metrics, "from_pretrained(dtype=bfloat16): ")


def overall(verdicts: list[Verdict]) -> Status:
    """FAIL if the trainer's verdict fails; else a harness problem if any verdict has one; else AFFECTED if an
    upstream verdict is; else PASS. (A `verl:` verdict's failure fails the check through the registry.)"""
    if any(v.name == "trainer" and v.status is Status.FAIL for v in verdicts):
        return Status.FAIL
    for v in verdicts:
        if v.status in (Status.ERROR, Status.TIMEOUT, Status.CRASH):
            return v.status
    return Status.AFFECTED if any(v.status is Status.AFFECTED for v in verdicts) else Status.PASS


def cast_summary(models: dict[str, dict[str, Any]]) -> str:
    """The drift with and without the gates kept float32, all else equal (bf16 compute, no FSDP2)."""
    parts = []
    for kind, m in models.items():
        c = m["cast"]
        parts.append(f"{kind}: gates bf16 {_figures(c['bf16_gates_bf16'])}, gates float32 "
                     f"{_figures(c['bf16_gates_fp32'])}, the gates' rounding alone {_figures(c['fp32_gates_rounded'])}")
    return "bf16 compute, log-prob drift from float32: " + "; ".join(parts)
