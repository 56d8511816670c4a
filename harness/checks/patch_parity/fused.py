"""The fused log-prob/entropy forward against log_softmax, and the rollout engine against the trainer.

Both compare log-probs of the same tokens computed two ways: the trainer's chunked forward
(`trainers.patches.fused_logprob.logprobs_and_entropy`) against the full-vocabulary
reference, and against what the rollout engine reported while sampling.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from harness.checks.patch_parity.inputs import (
    Models,
    Tolerance,
    cotangent,
    grad_error,
    gradients,
    max_abs,
    model_inputs,
)
from harness.results.records import Status, Verdict
from trainers.patches.fused_logprob import logprobs_and_entropy, reference_logprobs_and_entropy
from trainers.rollout import positions_from_mask
from trainers.worst import worst

TEMPERATURES = (0.7, 1.0)
CHUNK_SIZE = 7  # small and odd: many chunks, the last one partial

FusedFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def _loss(logprobs, entropy, seed):
    return (logprobs * cotangent(logprobs.shape, seed + 1)).sum() + (entropy * cotangent(entropy.shape, seed + 2)).sum()


def _fused_cell(model, kind: str, temperature: float, seed: int, fused_fn: FusedFn) -> tuple[dict, str]:
    """Errors of one (model, dtype) at one temperature, and the worst parameter's name."""
    inputs = model_inputs(model, kind, seed)
    logits = model(**inputs, use_cache=False).logits[:, :-1]
    want_lp, want_ent = reference_logprobs_and_entropy(logits, inputs["input_ids"][:, 1:], temperature)
    _loss(want_lp, want_ent, seed).backward()
    want_grads = gradients(model)
    extra = {k: v for k, v in inputs.items() if k != "input_ids"}
    got_lp, got_ent = fused_fn(model, inputs["input_ids"], temperature=temperature, chunk_size=CHUNK_SIZE, **extra)
    _loss(got_lp, got_ent, seed).backward()
    cell = {"logprob_max_abs_err": max_abs(got_lp, want_lp), "entropy_max_abs_err": max_abs(got_ent, want_ent)}
    cell["grad_rel_err"], worst_grad = grad_error(want_grads, gradients(model))
    return cell, worst_grad


def fused_verdicts(models: Models, tolerances: dict[str, Tolerance], seed: int = 0, kinds=("text", "vl", "moe"),
                   temperatures=TEMPERATURES, fused_fn: FusedFn = logprobs_and_entropy) -> list[Verdict]:
    """One verdict per temperature: fused log-probs, entropies and gradients against the reference."""
    verdicts = []
    for temperature in temperatures:
        metrics, failures = {"chunk_size": CHUNK_SIZE}, []
        for kind in kinds:
            for dtype, tol in tolerances.items():
                cell, worst_grad = _fused_cell(models.get(kind, dtype), kind, temperature, seed, fused_fn)
                metrics[f"{kind}/{dtype}"] = cell
                output_err = worst([cell["logprob_max_abs_err"], cell["entropy_max_abs_err"]])
                if not output_err <= tol.output:  # NaN fails
                    failures.append(f"{kind}/{dtype}: output error {output_err:.3g} > {tol.output:g}")
                if not cell["grad_rel_err"] <= tol.grad:
                    failures.append(f"{kind}/{dtype}: gradient error {cell['grad_rel_err']:.3g} > {tol.grad:g} "
                                    f"({worst_grad})")
        name = f"fused-logprob:T={temperature}"
        if failures:
            verdicts.append(Verdict(name, Status.FAIL, "; ".join(failures), metrics))
        else:
            verdicts.append(Verdict(name, Status.PASS, f"fused log-probs and entropy at T={temperature} match "
                                    "log_softmax and softmax entropy", metrics))
    return verdicts


ROLLOUT_TEMPERATURE = 0.7
PROMPT_LENGTHS = (3, 6, 9, 5)  # ragged, so left padding is exercised
MAX_NEW_TOKENS = 12


def rollout_vs_trainer(models: Models, tolerances: dict[str, Tolerance], seed: int = 0, engine: str = "hf",
                       make_rollout=None, kind: str = "text") -> list[Verdict]:
    """Sample with the engine, recompute the sampled tokens' log-probs with the trainer's forward."""
    name = f"rollout-vs-trainer:{engine}"
    if make_rollout is None:
        from trainers.rollout import make_rollout  # a project module: missing is an error, never a skip
    metrics, failures = {"temperature": ROLLOUT_TEMPERATURE, "max_new_tokens": MAX_NEW_TOKENS}, []
    for dtype, tol in tolerances.items():
        model = models.get(kind, dtype)
        gen = torch.Generator().manual_seed(seed)
        prompts = [torch.randint(3, 100, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
        batch = make_rollout(engine, model).generate(prompts, MAX_NEW_TOKENS, ROLLOUT_TEMPERATURE, seed)
        mask = batch.attention_mask
        positions = positions_from_mask(mask)
        with torch.no_grad():
            trainer_lp, _ = logprobs_and_entropy(model, batch.input_ids, attention_mask=mask, position_ids=positions,
                                                 temperature=ROLLOUT_TEMPERATURE)
        # trainer_lp[:, t] scores token t+1; the engine's column r scores token prompt_width + r.
        width = batch.prompt_width
        trainer_resp = trainer_lp[:, width - 1:width - 1 + batch.logprobs.shape[1]]
        live = batch.response_mask.bool()
        err = max_abs(trainer_resp[live], batch.logprobs.float()[live])
        metrics[dtype] = {"logprob_max_abs_err": err, "tokens": int(live.sum())}
        if int(live.sum()) == 0:
            failures.append(f"{dtype}: the engine sampled no response tokens")
        elif not err <= tol.rollout:
            failures.append(f"{dtype}: engine log-probs differ from the trainer's by {err:.3g} > {tol.rollout:g}")
    if failures:
        return [Verdict(name, Status.FAIL, "; ".join(failures), metrics)]
    return [Verdict(name, Status.PASS, "engine log-probs of sampled tokens match the trainer's recomputation",
                    metrics)]
