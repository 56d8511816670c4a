"""grpo-convergence in a row that installs verl: verl's GRPO math against this project's on the same batch
(`verl:grpo-math`). It runs in milliseconds, after the long run (importing verl starts threads that would keep the
trainer's ranks from being forked), and decides whether the convergence verdict speaks for verl.

verl's side, from the installed release: `core_algos.compute_grpo_outcome_advantage` (outcome reward on each
response's last token, normalised by the group's std), `workers.utils.losses.ppo_loss` (the loss verl's engine
workers call, given the per-token log-probs as a nested prompt-plus-response tensor and the global batch sizes as
non-tensor data, as the engine hands them over) with a `FSDPActorConfig` holding what verl's Qwen3.5 example
scripts select (SELECTED), and `rollout_corr_helper.compute_rollout_correction_weights` (token TIS). This project's
side: trainers.grpo.objective (group_advantages, policy_loss with a k3 KL term, truncated_importance_weights).
Compared per batch (BATCHES): advantages, the loss, and the loss's gradient with respect to the log-probs.
"""
from __future__ import annotations

from typing import Any

from harness.checks.support import verl
from harness.results.records import Status, Verdict

PART = "grpo-math"
ATOL = 1e-6
PROMPTS, SAMPLES, PROMPT_LEN, RESPONSE_LEN = 4, 5, 3, 12
# What verl's Qwen3.5 GRPO example scripts set (examples/grpo_trainer/run_qwen3_5_{27b,35b}_fsdp.sh,
# run_qwen3_5_{35b,397b}_megatron.sh at v0.8.0 and v0.9.0); the rest are verl's defaults, read back from its config.
SELECTED = {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "use_kl_loss": True, "kl_loss_coef": 0.01,
            "kl_loss_type": "low_var_kl", "entropy_coeff": 0.0, "rollout_n": SAMPLES}
# name: (what it is, whether this project's trainer has the same math there)
BATCHES = {
    "typical": ("ratios near 1, a reference policy close by", ""),
    "dp2": ("the typical batch over 2 data-parallel ranks, each with the global denominators", ""),
    "extreme-ratio": ("ratios e^1.5 > clip_ratio_c = 3 where advantages are negative", "verl's dual clip"),
    "extreme-kl": ("a reference policy far away (k3 > 10)", "verl's low_var_kl clamp to [-10, 10]"),
}  # name: (the batch, the verl mechanism that acts on it and this project's trainer lacks; "" for none)
NO_COUNTERPART = ("verl's dual clip (ratio > clip_ratio_c with a negative advantage), its low_var_kl clamp to "
                  "[-10, 10], and GSPO (policy_loss.loss_mode=gspo, the Qwen3.5 veomni scripts): this project's "
                  "trainer has none of them")


def make_batch(kind: str, seed: int = 0) -> dict[str, Any]:
    import numpy as np
    import torch

    generator = torch.Generator().manual_seed(seed)
    rows = PROMPTS * SAMPLES
    lengths = torch.randint(3, RESPONSE_LEN + 1, (rows,), generator=generator)
    mask = (torch.arange(RESPONSE_LEN)[None] < lengths[:, None]).float()
    rewards = torch.randint(0, 2, (rows,), generator=generator).float()
    rewards[:SAMPLES] = 1.0  # one group whose rewards are all equal: zero advantages
    old = -torch.rand(rows, RESPONSE_LEN, generator=generator) * 3
    logp = old + 0.05 * torch.randn(rows, RESPONSE_LEN, generator=generator)
    ref = old + 0.05 * torch.randn(rows, RESPONSE_LEN, generator=generator)
    behaviour = old + 0.3 * torch.randn(rows, RESPONSE_LEN, generator=generator)
    if kind == "extreme-kl":
        ref[:, ::3] = old[:, ::3] - 15.0
    if kind == "extreme-ratio":
        logp[:, 1::4] = old[:, 1::4] + 1.5
    return {"mask": mask, "rewards": rewards, "old": old * mask, "logp": logp * mask, "ref": ref * mask,
            "behaviour": behaviour * mask, "lengths": lengths, "index": np.repeat(np.arange(PROMPTS), SAMPLES)}


def verl_advantage(b: dict[str, Any]):
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_rewards = torch.zeros_like(b["mask"])
    token_rewards[torch.arange(len(b["lengths"])), b["lengths"] - 1] = b["rewards"]
    advantages, _ = compute_grpo_outcome_advantage(token_rewards, b["mask"], b["index"],
                                                   norm_adv_by_std_in_grpo=SELECTED["norm_adv_by_std_in_grpo"])
    return advantages


def actor_config():
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(strategy="fsdp2", ppo_mini_batch_size=PROMPTS * SAMPLES, ppo_micro_batch_size_per_gpu=1,
                           use_kl_loss=SELECTED["use_kl_loss"], kl_loss_coef=SELECTED["kl_loss_coef"],
                           kl_loss_type=SELECTED["kl_loss_type"], entropy_coeff=SELECTED["entropy_coeff"],
                           rollout_n=SELECTED["rollout_n"])


def verl_loss(b: dict[str, Any], advantages, rows: list[int], logp, dp_size: int):
    """verl's ppo_loss on `rows`, its inputs laid out as verl's engine hands them over."""
    import torch
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    lengths = [int(b["lengths"][r]) for r in rows]
    # the response's token t sits at position PROMPT_LEN - 1 + t of the prompt-plus-response log-probs
    sequences = [torch.cat([torch.zeros(PROMPT_LEN - 1), logp[r, :n], torch.zeros(1)]) for r, n in zip(rows, lengths)]
    model_output = {"log_probs": torch.nested.as_nested_tensor(sequences, layout=torch.jagged)}
    data = TensorDict({"prompts": torch.ones(len(rows), PROMPT_LEN, dtype=torch.long),
                       "responses": torch.ones(len(rows), RESPONSE_LEN, dtype=torch.long),
                       "attention_mask": torch.cat([torch.ones(len(rows), PROMPT_LEN), b["mask"][rows]], 1).long(),
                       "response_mask": b["mask"][rows], "old_log_probs": b["old"][rows],
                       "advantages": advantages[rows], "ref_log_prob": b["ref"][rows]}, batch_size=[len(rows)])
    tu.assign_non_tensor(data, dp_size=dp_size, batch_num_tokens=int(b["mask"].sum()),
                         global_batch_size=len(b["rewards"]))
    loss, _ = ppo_loss(actor_config(), model_output, data)
    return loss


def project_loss(b: dict[str, Any], advantages, rows: list[int], logp, dp_size: int):
    from trainers.grpo import objective

    config = objective.LossConfig(kl_coef=SELECTED["kl_loss_coef"], kl_estimator="k3", loss_agg="token-mean")
    loss, _ = objective.policy_loss(logp[rows], b["old"][rows], advantages[rows], b["mask"][rows], config,
                                    ref_logprobs=b["ref"][rows], denominator=float(b["mask"].sum()) / dp_size)
    return loss


def compare(kind: str) -> dict[str, float]:
    """The largest differences between verl's math and the project's on one batch."""
    from trainers.grpo import objective

    b = make_batch(kind)
    ours = objective.group_advantages(b["rewards"], SAMPLES)
    theirs = verl_advantage(b)
    errors = {"advantage": float((theirs - ours[:, None] * b["mask"]).abs().max()), "loss": 0.0, "gradient": 0.0}
    dp = 2 if kind == "dp2" else 1
    for rank in range(dp):
        rows = list(range(rank, len(b["rewards"]), dp))
        grads = []
        for loss_of, advantages in ((verl_loss, theirs), (project_loss, ours)):
            logp = b["logp"].clone().requires_grad_(True)
            loss = loss_of(b, advantages, rows, logp, dp)
            loss.backward()
            grads.append((float(loss.detach()), logp.grad))
        errors["loss"] = max(errors["loss"], abs(grads[0][0] - grads[1][0]))
        errors["gradient"] = max(errors["gradient"], float((grads[0][1] - grads[1][1]).abs().max()))
    return errors


def rollout_correction() -> float:
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    from trainers.grpo import objective

    b = make_batch("typical")
    theirs, _ = compute_rollout_correction_weights(b["old"] - b["behaviour"], b["mask"], rollout_is="token",
                                                   rollout_is_threshold=2.0)
    ours = objective.truncated_importance_weights(b["old"], b["behaviour"], 2.0) * b["mask"]
    return float((theirs - ours).abs().max())


def verl_functions() -> list:
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
    from verl.workers.config import FSDPActorConfig
    from verl.workers.utils.losses import ppo_loss

    return [compute_grpo_outcome_advantage, ppo_loss, FSDPActorConfig, compute_rollout_correction_weights]


def verdict() -> Verdict:
    ran: list = []
    try:
        ran = verl_functions()
        config = actor_config()
        defaults = {"loss_mode": config.policy_loss.get("loss_mode", "vanilla"), "clip_ratio": config.clip_ratio,
                    "clip_ratio_c": config.clip_ratio_c, "loss_agg_mode": config.loss_agg_mode}
        errors = {kind: compare(kind) for kind in BATCHES}
        tis = rollout_correction()
    except Exception as exc:  # noqa: BLE001 - verl's math raising on this stack is its outcome here
        return verl.verdict(PART, Status.FAIL, f"verl's GRPO math raises {verl.describe(exc)}", ran, raised=exc)
    metrics = {"selected": SELECTED, "verl_defaults": defaults, "tolerance": ATOL, "max_abs_errors": errors,
               "rollout_correction_tis": tis, "no_project_counterpart": NO_COUNTERPART}
    differs = {kind: max(err.values()) for kind, err in errors.items() if max(err.values()) > ATOL}
    same = [kind for kind, (_, mechanism) in BATCHES.items() if not mechanism]
    if any(kind in differs for kind in same) or tis > ATOL:
        wrong = ", ".join(f"{kind} ({differs[kind]:.2g})" for kind in same if kind in differs)
        return verl.verdict(PART, Status.FAIL, f"verl's GRPO math differs from this project's where both do the same "
                            f"math: {wrong or 'none'}; rollout correction (token TIS) {tis:.2g}", ran, metrics)
    extremes = ", ".join(f"{mechanism} ({kind}: {f'differs by {differs[kind]:.2g}' if kind in differs else 'equal'})"
                         for kind, (_, mechanism) in BATCHES.items() if mechanism)
    return verl.verdict(PART, Status.PASS, "advantage, loss and gradient equal to this project's on typical batches "
                        f"(1 and 2 ranks, largest difference {max(max(errors[k].values()) for k in same):.1g}), token "
                        "TIS weights equal, with the settings of verl's Qwen3.5 scripts; no counterpart in this "
                        f"project: {extremes}, GSPO (not compared)", ran, metrics)


def speaks_for_verl(math: Verdict) -> str:
    """The sentence the convergence verdict carries in a verl row: whether, and where, it speaks for verl."""
    release = (math.metrics.get("verl") or {}).get("release")
    if math.status is Status.PASS:
        return (f"speaks for verl {release}'s GRPO math in the typical regime only (verl:grpo-math: equal); not for "
                f"{NO_COUNTERPART}")
    return f"does not speak for verl {release}: verl:grpo-math {math.status.value}"


def attach(result, math: Verdict):
    """The convergence result with verl's math verdict added and its message saying whom it speaks for."""
    result.verdicts.append(math)
    result.message = f"{result.message}; {speaks_for_verl(math)}" if result.message else speaks_for_verl(math)
    if math.status is Status.FAIL and not result.status.is_failure:
        result.status = Status.FAIL
    return result
