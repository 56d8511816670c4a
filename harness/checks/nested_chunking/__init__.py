"""nested-chunking: jagged mRoPE position ids must survive micro-batch chunking.

For every known failure family (probes.FAMILIES) three levels are run:
- torch: raw nested-tensor operations (unbind, chunk, split, slicing, to_padded_tensor) - upstream;
- tensordict: TensorDict operations (get, chunk, split, slicing, indexing, consolidate) - upstream;
- trainer: `trainers.grpo.data.chunk_tensordict` into 2 and 3 micro-batches - must give exactly the
  padded reference's values and the canonical layout on every key.
One more trainer verdict, `grpo-update/trainer` (trainer_path): the micro-batching the GRPO update of
both trainers runs (trainers.grpo.micro_batches, through chunk_tensordict) rejoins to its batch exactly.
In a row that installs verl, `verl:chunking/<case>` verdicts run verl's own chunking of its batches
(verl_chain, verl_metadata); one that fails fails the check.
Upstream verdicts are PASS when every operation is right and AFFECTED when one raises or is
silently wrong (a known upstream bug reproduced). The check FAILS iff the trainer level fails;
otherwise it is AFFECTED if any upstream level is, else PASS. Needs torch and tensordict, not transformers.
"""
from __future__ import annotations

import time
from typing import Any

from harness.checks import CheckOptions
from harness.checks.nested_chunking import trainer_path, verl_chain
from harness.checks.nested_chunking.probes import (
    FAMILIES,
    OK,
    Family,
    family_tensordict,
    reference_samples,
    upstream_outcomes,
)
from harness.checks.support import verl
from harness.results.records import CheckResult, Status, Verdict

NAME = "nested-chunking"
TRAINER_CHUNKS = (2, 3)  # 3 chunks of 4 samples gives single-sample chunks: trivially equal lengths


def run(options: CheckOptions) -> CheckResult:
    import torch

    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    torch.manual_seed(options.seed)
    started = time.perf_counter()
    versions = {"torch": torch.__version__, "tensordict": _tensordict_version()}
    if versions["tensordict"] is None:
        return CheckResult(NAME, Status.SKIP, "tensordict is not installed in this cell", metrics=versions)
    import_seconds = time.perf_counter() - started  # importing tensordict dominates on a cold cache
    start = time.perf_counter()

    table: dict[str, dict[str, Any]] = {}
    verdicts: list[Verdict] = []
    for family in FAMILIES.values():
        upstream = upstream_outcomes(family)
        trainer = trainer_outcomes(family)
        table[family.name] = {**upstream, "trainer": trainer}
        for level in ("torch", "tensordict"):
            if upstream[level] is not None:
                verdicts.append(_upstream_verdict(family, level, upstream[level]))
        verdicts.append(_trainer_verdict(family, trainer))
    verdicts.append(trainer_path.verdict())
    verl_seconds = None
    if verl.installed():  # a verl row: verl's own chunking of its batches too
        verl_started = time.perf_counter()
        verdicts += verl.guarded("chunking", verl_chain.verdicts)
        verl_seconds = round(time.perf_counter() - verl_started, 3)  # importing verl (and Ray) most of it

    status = _overall(verdicts)
    trainer_failed = [v.name for v in verdicts if v.name.endswith("/trainer") and v.status is Status.FAIL]
    verl_failed = [v.name for v in verdicts if v.name.startswith(verl.PREFIX) and v.status is Status.FAIL]
    affected = [v.name for v in verdicts if v.status is Status.AFFECTED]
    if status is Status.FAIL:
        message = "; ".join(part for part in (
            trainer_failed and f"trainer chunking gives wrong values in: {', '.join(trainer_failed)}",
            verl_failed and f"verl's own chunking fails in: {', '.join(verl_failed)}") if part)
    elif status is Status.AFFECTED:
        message = f"trainer chunking exact; upstream bugs reproduced in {len(affected)} of " \
                  f"{sum(v.name.split('/')[1] != 'trainer' for v in verdicts if not v.name.startswith(verl.PREFIX))} " \
                  "family levels"
    else:
        message = "trainer chunking exact; no upstream nested-tensor bug reproduced"
    mine = [v for v in verdicts if v.name.startswith(verl.PREFIX)]
    if mine and not verl_failed:
        skipped = " (the others could not run here)" if any(v.status is Status.SKIP for v in mine) else ""
        message += f"; verl's own chunking exact in {sum(v.status is Status.PASS for v in mine)} of {len(mine)} cases"
        message += skipped
    metrics = {**versions, "families": {f.name: {"summary": f.summary, "refs": f.refs, "key": f.key,
                                                 "lengths": list(f.lengths)} for f in FAMILIES.values()},
               "table": table, "device": "cpu",
               "import_seconds": round(import_seconds, 3), "seconds": round(time.perf_counter() - start, 3),
               "verl_seconds": verl_seconds}
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts)


def trainer_outcomes(family: Family) -> dict[str, str]:
    """The trainer's chunk function on the family's batch, judged on every key against the reference.
    Looks the function up at call time, so a test can replace it with a broken chunker."""
    from harness.checks.nested_chunking.probes import probe
    from trainers.grpo import data

    reference = reference_samples(family)
    try:
        td = family_tensordict(family, reference)
    except Exception as exc:  # noqa: BLE001 - the family's input cannot be made here: nothing to chunk
        return {"produce": f"raises:{type(exc).__name__}"}
    return {f"chunks={n}": probe(lambda n=n: judge_chunks(data.chunk_tensordict(td, n), reference, n))
            for n in TRAINER_CHUNKS}


def judge_chunks(chunks: list, reference: dict[str, Any], count: int) -> str:
    import torch

    from harness.checks.nested_chunking.probes import first_problem, judge_nested
    from trainers.grpo.data import split_sizes

    if len(chunks) != count:
        return "wrong:batch"
    sizes = split_sizes(len(reference["uid"]), count)
    outcomes, start = [], 0
    for chunk, size in zip(chunks, sizes):
        stop = start + size
        if tuple(chunk.batch_size) != (size,):
            return "wrong:batch"
        for key in ("input_ids", "position_ids"):
            outcomes.append(judge_nested(chunk.get(key), reference[key][start:stop], strict=True))
        advantages = chunk.get("advantages")
        outcomes.append(OK if torch.equal(advantages, reference["advantages"][start:stop]) else "wrong:dense")
        outcomes.append(OK if list(chunk.get("uid").tolist()) == reference["uid"][start:stop] else "wrong:non-tensor")
        start = stop
    return first_problem(outcomes)


def _upstream_verdict(family: Family, level: str, outcomes: dict[str, str]) -> Verdict:
    bad = {op: o for op, o in outcomes.items() if o != OK}
    status = Status.AFFECTED if bad else Status.PASS
    message = "; ".join(f"{op}: {o}" for op, o in bad.items()) or "all operations give the reference values"
    return Verdict(f"{family.name}/{level}", status, message, metrics=dict(outcomes))


def _trainer_verdict(family: Family, outcomes: dict[str, str]) -> Verdict:
    if "produce" in outcomes:  # upstream could not even build the family's batch
        return Verdict(f"{family.name}/trainer", Status.SKIP, f"input not buildable: {outcomes['produce']}",
                       metrics=dict(outcomes))
    bad = {k: o for k, o in outcomes.items() if o != OK}
    status = Status.FAIL if bad else Status.PASS
    message = "; ".join(f"{k}: {o}" for k, o in bad.items()) or "exact padded-reference values"
    return Verdict(f"{family.name}/trainer", status, message, metrics=dict(outcomes))


def _overall(verdicts: list[Verdict]) -> Status:
    if any(v.status is Status.FAIL for v in verdicts):
        return Status.FAIL
    if any(v.status is Status.AFFECTED for v in verdicts):
        return Status.AFFECTED
    return Status.PASS


def _tensordict_version() -> str | None:
    try:
        import tensordict
    except ImportError:
        return None
    return str(tensordict.__version__)


def outcome_table(result: CheckResult) -> str:
    """A plain-text table of outcomes per family and level (for logs and the report's notes)."""
    lines = []
    for family, levels in result.metrics.get("table", {}).items():
        for level, outcomes in levels.items():
            cells = "n/a" if outcomes is None else ", ".join(f"{op}={o}" for op, o in outcomes.items())
            lines.append(f"{family:24} {level:11} {cells}")
    return "\n".join(lines)
