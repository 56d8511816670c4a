"""vllm-rollout's sleep and wake verdicts: the engine an RL loop puts to sleep and wakes at every step.

For the hybrid text model and the MoE model (SLEEP_KINDS), an engine started with vLLM's sleep mode goes through
the cycles of CYCLES (one sleep level each), each what a colocated RL step does to it, in verl's order: the engine
samples, the trainer's policy takes one GRPO update, then `sleep(level)`, wake the weights, sync the updated
weights into them, wake the KV cache (which holds the Gated DeltaNet states), sample again. After each cycle a
fresh engine loaded with the same weights samples the same prompts with the same seeds. Verdicts:
- `<kind>/sleep-wake`: after every cycle the engine's log-probs match the fresh engine's, row by row up to the
  first token where the two differ, and the trainer's recomputation of all of them, within the check's tolerance;
- `<kind>/sleep-greedy`: at temperature 0 the engine keeps the trainer's argmax wherever the trainer's top two
  logits are clearly apart, and its tokens do not collapse onto one (COLLAPSE_SHARE of them, where the fresh
  engine's do not): generation collapsing to token 0 after discarded state pages is vllm RFC #48310.
A cycle that raises (vLLM's wake crashed on Mamba and DeltaNet layers, vllm #41564, fixed by #41602) fails both
with its exception. Where the platform's vLLM has no sleep mode (vLLM on a CPU), both are `skip` verdicts that say
it needs an accelerator, with the reason read from vLLM's code (support/vllm_engine.sleep_mode_refusal).
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

from harness.checks import CheckOptions
from harness.checks.support import vllm_engine
from harness.checks.vllm_rollout.measures import (
    GREEDY_PROMPTS,
    NEW_TOKENS,
    PROMPTS,
    ROWS,
    greedy_agreement,
    grpo_update,
    logprob_error,
    start_engine,
    tolerance_for,
)
from harness.results.records import Status, Verdict
from trainers.worst import worst

SLEEP_KINDS = ("text", "moe")  # the hybrid model, and the hybrid MoE
# Sleep levels, one cycle each: level 1 keeps a host copy of the weights, level 2 drops them (the sync refills
# them); a state page that comes back wrong may show only on a later wake, hence three.
CYCLES = (1, 2, 1)
# A greedy run in which one token takes this share of all tokens, while the fresh engine's does not, collapsed.
COLLAPSE_SHARE = 0.9
NAMES = ("sleep-wake", "sleep-greedy")


def default_cycle(rollout, state: dict, level: int) -> None:
    """One RL step's sleep and wake around the weight sync, as verl drives a colocated vLLM."""
    rollout.sleep(level)
    rollout.wake_up(["weights"])
    rollout.sync_weights(state)
    rollout.wake_up(["kv_cache"])


def _sleeping_engine(kind: str, policy):
    return start_engine(kind, policy, enable_sleep_mode=True)


def prefix_error(batch, reference) -> dict:
    """Max |log-prob difference| between two engines' samples of the same prompts and seeds, on each row up to the
    first token where they differ (after it the contexts differ); how many rows diverged and positions compared."""
    import torch

    same = (batch.response_ids == reference.response_ids) & batch.response_mask.bool() & reference.response_mask.bool()
    common = same.long().cumprod(dim=1).bool()  # up to the first differing token
    error = ((batch.logprobs - reference.logprobs).abs() * common).amax() if common.any() else torch.tensor(0.0)
    return {"max_abs_error": float(error), "compared": int(common.sum()),
            "rows_diverged": int((~common & batch.response_mask.bool()).any(dim=1).sum())}


def dominant_token(batch) -> tuple[int, float]:
    """The most frequent response token and its share of all response tokens."""
    tokens = batch.response_ids[batch.response_mask.bool()].tolist()
    if not tokens:
        return -1, 0.0
    token, count = Counter(tokens).most_common(1)[0]
    return int(token), count / len(tokens)


class _Prompts:
    """The prompts of one kind's cycles: a GRPO batch (groups of ROWS // PROMPTS) and greedy prompts."""

    def __init__(self, seed: int):
        from trainers.grpo.tasks import make_task

        self.task = make_task("target-set")
        self.group = ROWS // PROMPTS
        self.rows = [p for p in self.task.prompts(PROMPTS, random.Random(seed)) for _ in range(self.group)]
        self.greedy = self.task.prompts(GREEDY_PROMPTS, random.Random(seed + 1))
        self.seed = seed

    def seeds(self, cycle: int) -> list[int]:
        return [(self.seed * 1000 + row) * 10 + cycle for row in range(ROWS)]


def _measure(cycle: int, level: int, policy, after, greedy, reference, reference_greedy) -> dict:
    token, share = dominant_token(greedy)
    fresh_token, fresh_share = dominant_token(reference_greedy)
    differ = (greedy.response_ids != reference_greedy.response_ids) & greedy.response_mask.bool()
    return {"cycle": cycle, "level": level, "fresh": prefix_error(after, reference),
            "trainer_error": logprob_error(policy, after), "greedy": greedy_agreement(policy, greedy),
            "fresh_greedy_differ": int(differ.sum()), "dominant_token": token, "dominant_share": share,
            "fresh_dominant_token": fresh_token, "fresh_dominant_share": fresh_share}


def run_cycles(kind: str, options: CheckOptions, start: Callable, fresh: Callable, cycle: Callable,
               cycles=CYCLES) -> tuple[list[dict], str | None]:
    """The per-cycle measurements, and the error that stopped the cycles (None when all ran)."""
    from trainers.models import build_model
    from trainers.runtime.device import plan

    policy = build_model(kind, vllm_engine.MODEL_OVERRIDES[kind], seed=options.seed).to(plan().device(0)).eval()
    prompts = _Prompts(options.seed)
    rollout = start(kind, policy)
    records: list[dict] = []
    try:
        for index, level in enumerate(cycles, start=1):
            stage = f"cycle {index} (sleep level {level})"
            try:
                batch = rollout.generate(prompts.rows, NEW_TOKENS, 1.0, prompts.seeds(2 * index))
                grpo_update(policy, batch, prompts.task, prompts.rows, prompts.group)
                cycle(rollout, policy.state_dict(), level)
                after = rollout.generate(prompts.rows, NEW_TOKENS, 1.0, prompts.seeds(2 * index + 1))
                greedy = rollout.generate(prompts.greedy, NEW_TOKENS, 0.0, 0)
            except Exception as exc:  # noqa: BLE001 - a crash in the cycle is the verdict's finding
                return records, f"{stage}: {type(exc).__name__}: {exc}"[:1500]
            reference = fresh(kind, policy)
            try:
                expected = reference.generate(prompts.rows, NEW_TOKENS, 1.0, prompts.seeds(2 * index + 1))
                expected_greedy = reference.generate(prompts.greedy, NEW_TOKENS, 0.0, 0)
            finally:
                reference.close()
            records.append(_measure(index, level, policy, after, greedy, expected, expected_greedy))
    finally:
        rollout.close()
    return records, None


def logprob_verdict(name: str, records: list[dict], crash: str | None, tolerance: float, label: str,
                    metrics: dict) -> Verdict:
    problems = [crash] if crash else []
    for r in records:
        fresh = r["fresh"]
        if not worst([fresh["max_abs_error"], r["trainer_error"]]) <= tolerance:  # NaN fails
            problems.append(f"cycle {r['cycle']} (sleep level {r['level']}): log-prob error "
                            f"{fresh['max_abs_error']:.4f} against a fresh engine, {r['trainer_error']:.4f} against "
                            f"the trainer (> {tolerance})")
        elif not fresh["compared"]:
            problems.append(f"cycle {r['cycle']}: no token in common with a fresh engine's samples to compare")
    shown = "; ".join(f"{r['cycle']}: {r['fresh']['max_abs_error']:.4f} / {r['trainer_error']:.4f}" for r in records)
    if problems:
        return Verdict(name, Status.FAIL, f"{label}: " + "; ".join(problems), metrics)
    return Verdict(name, Status.PASS, f"{label}: after each of {len(records)} sleep/wake cycles (levels "
                   f"{', '.join(str(r['level']) for r in records)}) the log-probs match a fresh engine's and the "
                   f"trainer's within {tolerance} (cycle: fresh / trainer error {shown})", metrics)


def greedy_verdict(name: str, records: list[dict], crash: str | None, label: str, metrics: dict) -> Verdict:
    problems = [crash] if crash else []
    for r in records:
        counts = r["greedy"]
        if counts["differ"]:
            problems.append(f"cycle {r['cycle']} (sleep level {r['level']}): {counts['differ']} of {counts['judged']}"
                            f" clear greedy tokens differ from the trainer's argmax")
        if r["dominant_share"] >= COLLAPSE_SHARE > r["fresh_dominant_share"]:
            problems.append(f"cycle {r['cycle']}: greedy tokens collapsed to token {r['dominant_token']} "
                            f"({r['dominant_share']:.0%} of them; a fresh engine's most common: "
                            f"{r['fresh_dominant_share']:.0%})")
    if problems:
        return Verdict(name, Status.FAIL, f"{label}: " + "; ".join(problems), metrics)
    judged = sum(r["greedy"]["judged"] for r in records)
    if not judged:
        return Verdict(name, Status.SKIP, f"{label}: no clear greedy token to judge after the cycles", metrics)
    return Verdict(name, Status.PASS, f"{label}: after each of {len(records)} sleep/wake cycles the greedy tokens "
                   f"keep the trainer's argmax ({judged} clear tokens judged) and do not collapse (largest share of "
                   f"one token: {max(r['dominant_share'] for r in records):.0%})", metrics)


def sleep_wake_verdicts(kind: str, options: CheckOptions, engine: dict, start: Callable | None = None,
                        fresh: Callable | None = None, cycle: Callable = default_cycle, cycles=CYCLES,
                        platform_check: bool = True) -> list[Verdict]:
    """The two verdicts of one kind. `start(kind, policy)` starts the engine that sleeps (vLLM with sleep mode),
    `fresh(kind, policy)` a reference engine, `cycle(rollout, state, level)` one sleep and wake around the sync;
    tests pass stand-ins and broken cycles. `platform_check=False` runs the cycles whatever vLLM says of the
    platform (a test of the machinery on vLLM's CPU no-op sleep)."""
    label = f"{vllm_engine.describe(engine)}, sleep mode"
    names = [f"{kind}/{n}" for n in NAMES]
    reason = vllm_engine.sleep_mode_refusal() if platform_check else None
    if reason is not None:
        return [Verdict(n, Status.SKIP, f"needs an accelerator: {reason}", {"engine": engine}) for n in names]
    records, crash = run_cycles(kind, options, start or _sleeping_engine, fresh or start_engine, cycle, cycles)
    metrics = {"engine": engine, "cycles": records, "levels": list(cycles), "crash": crash}
    return [logprob_verdict(names[0], records, crash, tolerance_for(kind), label, metrics),
            greedy_verdict(names[1], records, crash, label, metrics)]
