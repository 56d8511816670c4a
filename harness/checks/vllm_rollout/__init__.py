"""vllm-rollout: the cell's own vLLM as the rollout engine of a tiny Qwen3.5 GRPO step.

Skipped, in well under a second, in cells without vLLM. Otherwise, for each of the three tiny Qwen3.5
models (text, vision-language, MoE; see KINDS), verdicts named `<kind>/<verdict>`, each recording the
engine (distribution and version) that produced it:
- load: the engine starts and loads the model (saved by the trainer's code); `skip` with vLLM's own
  reason when the release does not register the architecture, never a pass;
- logprobs: the log-probs the engine reports for its sampled tokens match the trainer's
  recomputation on the same weights within TOLERANCE for the engine's dtype;
- greedy: at temperature 0 the engine picks the trainer's argmax token at every position where
  the trainer's top two logits are further apart than GREEDY_MARGIN (closer ones are ties at the
  engine's precision and are counted, not judged; with none judged the verdict is a skip);
- weight-sync: after one GRPO update of the trainer's policy and a sync into the engine, the
  engine's log-probs match the updated policy within TOLERANCE, and the pre-update policy no
  longer explains them (its distance must exceed STALE_FACTOR x TOLERANCE, so a sync that does
  nothing cannot pass). When the sync fails, a fresh engine loaded with the same weights is
  measured too and named in the message, which tells a broken in-place reload from a model the
  engine computes differently.
The VL model also gets logprobs-image, greedy-image and weight-sync-image on prompts with an image
(vision tower, image-token expansion and mRoPE positions); its GRPO update includes those rows, so
the vision tower's weights change and must reach the engine.
The text and MoE models also get sleep-wake and sleep-greedy: the engine's log-probs and greedy tokens
after cycles of vLLM's sleep, weight sync and wake (sleep_wake.py); `skip` with vLLM's reason where the
platform has no sleep mode (vLLM on a CPU).
"""
from __future__ import annotations

import copy
import random

from harness.checks import CheckOptions
from harness.checks.support import vllm_engine
from harness.checks.vllm_rollout import sleep_wake
from harness.checks.vllm_rollout import vision as vllm_vision
from harness.checks.vllm_rollout.measures import (  # noqa: F401  (TOLERANCE, MOE_TOLERANCE: the check's own numbers)
    GREEDY_MARGIN,
    GREEDY_PROMPTS,
    MOE_TOLERANCE,
    NEW_TOKENS,
    PROMPTS,
    ROWS,
    STALE_FACTOR,
    TOLERANCE,
    greedy_agreement,
    grpo_update,
    logprob_error,
    start_engine,
    tolerance_for,
)
from harness.results.records import CheckResult, Status, Verdict
from trainers.worst import worst

NAME = "vllm-rollout"
# All three kinds in every vLLM cell: whether a release loads the VL or MoE Qwen3.5 belongs to the
# (vLLM, transformers, torch) pins a cell names, not to the model its trainer checks train, and the
# CPU matrix's model axis is the text model alone.
KINDS = ("text", "vl", "moe")
IMAGE_PROMPTS = 3  # the VL model's image rows: 3 prompts (each with its own image) x a group of 4


def _within(name: str, error: float, tolerance: float, engine: dict, label: str, extra: dict | None = None) -> Verdict:
    ok = error <= tolerance
    return Verdict(name, Status.PASS if ok else Status.FAIL,
                   f"{label}: max log-prob error {error:.4f} {'<=' if ok else '>'} {tolerance}",
                   {"max_abs_error": error, "tolerance": tolerance, "engine": engine, **(extra or {})})


def _greedy(name: str, counts: dict, engine: dict, label: str) -> Verdict:
    status = Status.FAIL if counts["differ"] else Status.PASS if counts["judged"] else Status.SKIP  # nothing judged
    return Verdict(name, status,
                   f"{label}: {counts['differ']} of {counts['judged']} clear greedy tokens differ from the "
                   f"trainer's argmax ({counts['ties']} near-ties not judged)",
                   {**counts, "margin": GREEDY_MARGIN, "engine": engine})


class _Probe:
    """The prompts, seeds and images of one kind's run, and the engine samples they give."""

    def __init__(self, kind: str, policy, seed: int):
        from trainers.grpo.tasks import make_task

        self.kind, self.policy, self.seed = kind, policy, seed
        self.task = make_task("target-set")
        group = ROWS // PROMPTS
        self.prompts = [p for p in self.task.prompts(PROMPTS, random.Random(seed)) for _ in range(group)]
        self.seeds = [seed * 1000 + row for row in range(ROWS)]
        self.image_prompts = self.prompts[:IMAGE_PROMPTS * group] if kind == "vl" else []
        self.greedy_prompts = self.task.prompts(GREEDY_PROMPTS, random.Random(seed + 1))

    def sample(self, rollout, shift: int = 0):
        """(text batch, image rows) sampled at temperature 1 with the probe's seeds (+ shift)."""
        seeds = [s + shift for s in self.seeds]
        batch = rollout.generate(self.prompts, NEW_TOKENS, 1.0, seeds)
        # The image processor from the folder this engine loaded (a sync may have started a new engine).
        rows = (vllm_vision.generate(rollout, self.policy.config, str(rollout.model_dir), self.image_prompts,
                                     seeds[:len(self.image_prompts)], self.seed, NEW_TOKENS, 1.0)
                if self.image_prompts else [])
        return batch, rows

    def errors(self, model, batch, rows) -> dict[str, float]:
        found = {"": logprob_error(model, batch)}
        if rows:
            found["-image"] = vllm_vision.logprob_error(model, rows)
        return found


def _default_sync(rollout, policy, before):
    rollout.sync_weights(policy.state_dict())


def kind_verdicts(kind: str, options: CheckOptions, engine: dict, sync=None) -> list[Verdict]:
    """The verdicts of one model kind; `sync(rollout, policy, before)` replaces the engine's weight sync
    (tests pass broken ones) and may return a new engine that replaces the old one."""
    from trainers.models import build_model
    from trainers.runtime.device import plan

    label = vllm_engine.describe(engine)
    architecture = vllm_engine.ARCHITECTURES[kind]
    reason = vllm_engine.unregistered(kind)
    if reason is not None:
        return [Verdict(f"{kind}/load", Status.SKIP, f"{label}: {reason}", {"engine": engine})]
    policy = build_model(kind, vllm_engine.MODEL_OVERRIDES[kind], seed=options.seed).to(plan().device(0)).eval()
    try:
        rollout = start_engine(kind, policy)
    except Exception as exc:  # noqa: BLE001 - any failure to start or load is this verdict's finding
        message = f"{label} could not load the tiny Qwen3.5 {kind} model ({architecture}): {type(exc).__name__}: {exc}"
        return [Verdict(f"{kind}/load", Status.FAIL, message[:2000], {"engine": engine})]
    verdicts = [Verdict(f"{kind}/load", Status.PASS, f"{label} loaded the tiny Qwen3.5 {kind} model ({architecture})",
                        {"engine": engine, "architecture": architecture})]
    tolerance = tolerance_for(kind)
    probe = _Probe(kind, policy, options.seed)
    try:
        batch, rows = probe.sample(rollout)
        for suffix, error in probe.errors(policy, batch, rows).items():
            verdicts.append(_within(f"{kind}/logprobs{suffix}", error, tolerance, engine, label))
        verdicts.append(_greedy(f"{kind}/greedy", greedy_agreement(
            policy, rollout.generate(probe.greedy_prompts, NEW_TOKENS, 0.0, 0)), engine, label))
        if probe.image_prompts:
            shown = probe.greedy_prompts[:IMAGE_PROMPTS * 2]
            greedy_rows = vllm_vision.generate(rollout, policy.config, str(rollout.model_dir), shown, [0] * len(shown),
                                               options.seed, NEW_TOKENS, 0.0)
            verdicts.append(_greedy(f"{kind}/greedy-image",
                                    vllm_vision.greedy_agreement(policy, greedy_rows, GREEDY_MARGIN), engine, label))

        before = copy.deepcopy(policy)
        grpo_update(policy, batch, probe.task, probe.prompts, ROWS // PROMPTS,
                    image_rows=rows, image_prompts=probe.image_prompts)
        rollout = (sync or _default_sync)(rollout, policy, before) or rollout
        after = probe.sample(rollout, shift=1)
        synced, stale = probe.errors(policy, *after), probe.errors(before, *after)
        failed = not worst(synced.values()) <= tolerance  # NaN fails
        fresh = _fresh_engine_errors(kind, probe, policy) if sync is None and failed else {}
        for suffix in synced:
            verdicts.append(_sync_verdict(f"{kind}/weight-sync{suffix}", synced[suffix], stale[suffix],
                                          fresh.get(suffix), tolerance, engine, label))
    finally:
        rollout.close()
    return verdicts


def _fresh_engine_errors(kind: str, probe: _Probe, policy) -> dict[str, float]:
    """The errors of a new engine loaded with the synced weights: within tolerance, they show that the
    in-place reload, not the engine's model code, is what the failed sync verdict measured."""
    rollout = start_engine(kind, policy)
    try:
        return probe.errors(policy, *probe.sample(rollout, shift=1))
    finally:
        rollout.close()


def _sync_verdict(name: str, synced: float, stale: float, fresh: float | None, tolerance: float, engine: dict,
                  label: str) -> Verdict:
    verdict = _within(name, synced, tolerance, engine, label,
                      {"stale_error": stale, "stale_minimum": STALE_FACTOR * tolerance, "fresh_engine_error": fresh})
    if stale <= STALE_FACTOR * tolerance:  # the update did not move the model enough to tell
        verdict.status = Status.FAIL
        verdict.message += f"; but the pre-update weights explain the engine too ({stale:.4f}): not decisive"
    else:
        verdict.message += f" (pre-update weights: {stale:.4f})"
    if fresh is not None:
        verdict.message += f"; a fresh engine loaded with the same weights: {fresh:.4f}"
    return verdict


def _sleep_verdicts(kind: str, options: CheckOptions, engine: dict, load: Verdict, sleep: dict) -> list[Verdict]:
    if load.status is not Status.PASS:  # nothing to put to sleep
        return [Verdict(f"{kind}/{name}", Status.SKIP, f"the engine did not load the model: {load.message}"[:2000],
                        {"engine": engine}) for name in sleep_wake.NAMES]
    return sleep_wake.sleep_wake_verdicts(kind, options, engine, **sleep)


def run(options: CheckOptions) -> CheckResult:
    engine = vllm_engine.installed()
    if engine is None:
        return CheckResult(NAME, Status.SKIP, "no vLLM in this cell")
    vllm_engine.prepare_environment()
    return run_with(options, engine)


def run_with(options: CheckOptions, engine: dict, sync=None, kinds=KINDS, sleep: dict | None = None) -> CheckResult:
    """The check over `kinds`; `sync` as in kind_verdicts, `sleep` the keyword arguments of
    sleep_wake.sleep_wake_verdicts (tests pass stand-ins and broken cycles)."""
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    verdicts = []
    for kind in kinds:
        found = kind_verdicts(kind, options, engine, sync)
        verdicts += found
        if kind in sleep_wake.SLEEP_KINDS:
            verdicts += _sleep_verdicts(kind, options, engine, found[0], sleep or {})
    metrics = {"engine": engine, "dtype": vllm_engine.ENGINE_DTYPE, "kinds": list(kinds),
               **{v.name: v.metrics for v in verdicts if v.metrics}}
    failed = [v for v in verdicts if v.status is Status.FAIL]
    passed = [v for v in verdicts if v.status is Status.PASS]
    status = Status.FAIL if failed else Status.PASS if passed else Status.SKIP
    shown = failed or [v for v in verdicts if v.status is Status.SKIP or not v.name.endswith("/load")]
    return CheckResult(NAME, status, "; ".join(f"{v.name}: {v.message}" for v in shown)[:4000], metrics=metrics,
                       verdicts=verdicts)
