"""Patched against stock: the same tiny model, the same inputs, outputs and gradients compared.

The default probe compares logits and the gradients of a fixed random projection of them. A
patch that changes what the forward returns (the fused log-prob forward) has its own probe:
log-probs and entropies at a temperature, against log_softmax of the stock logits.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from harness.checks.patch_parity.built import compare_built
from harness.checks.patch_parity.chunk import compare_rule
from harness.checks.patch_parity.inputs import (
    Models,
    Tolerance,
    cotangent,
    grad_error,
    gradients,
    kinds_touched,
    max_abs,
    model_inputs,
)
from harness.results.records import Status, Verdict
from trainers.patches.base import Patch
from trainers.patches.fused_logprob import reference_logprobs_and_entropy
from trainers.worst import worst

FUSED_TEMPERATURE = 0.7  # not 1.0, so a temperature that is ignored shows


def _logits_probe(model, inputs, seed: int):
    logits = model(**inputs, use_cache=False).logits
    (logits.float() * cotangent(logits.shape, seed + 1)).sum().backward()
    return {"logits": logits.detach()}, gradients(model)


def stock_fused_probe(model, inputs, seed: int):
    """log_softmax / entropy of the stock logits at FUSED_TEMPERATURE, with gradients."""
    logits = model(**inputs, use_cache=False).logits[:, :-1]
    logprobs, entropy = reference_logprobs_and_entropy(logits, inputs["input_ids"][:, 1:], FUSED_TEMPERATURE)
    _backward_logprob_loss(logprobs, entropy, seed)
    return {"logprobs": logprobs.detach(), "entropy": entropy.detach()}, gradients(model)


def patched_fused_probe(model, inputs, seed: int):
    out = model(**inputs, return_logprobs=True, temperature=FUSED_TEMPERATURE)
    _backward_logprob_loss(out.log_probs, out.entropy, seed)
    return {"logprobs": out.log_probs.detach(), "entropy": out.entropy.detach()}, gradients(model)


def _backward_logprob_loss(logprobs, entropy, seed: int) -> None:
    ((logprobs * cotangent(logprobs.shape, seed + 1)).sum()
     + (entropy * cotangent(entropy.shape, seed + 2)).sum()).backward()


Probe = Callable[..., tuple[dict[str, torch.Tensor], dict]]
# patch-name prefix -> (stock probe, patched probe); every other patch uses the logits probe on both sides.
PROBES: dict[str, tuple[Probe, Probe]] = {"fused-logprob": (stock_fused_probe, patched_fused_probe)}


def _probes(patch: Patch) -> tuple[Probe, Probe]:
    return PROBES.get(patch.name.split(":")[0], (_logits_probe, _logits_probe))


# patch-name prefix -> a comparison of its own, for targets that are compared outside a model.
RULE_COMPARISONS = {"gated-delta-chunk": compare_rule}
# patch-name prefixes compared on models built with and without the patch (targets bound at build,
# parity_built.compare_built). The fitted chunk has both: its rule on lengths around the chunk sizes, and the
# model (grouped value heads, prefill).
BUILT_PREFIXES = {"causal-conv1d", "causal-conv1d-update", "gated-delta-step", "gated-delta-chunk"}


def _together(verdicts: list[Verdict]) -> Verdict:
    """Several comparisons of one patch as its one verdict: the worst status, every message and metric."""
    if all(v.status is Status.SKIP for v in verdicts):  # not applicable here: said once
        return verdicts[0]
    first_failure = next((v for v in verdicts if v.status.is_failure), None) or verdicts[0]
    metrics = {key: value for v in verdicts for key, value in (v.metrics or {}).items()}
    return Verdict(first_failure.name, first_failure.status, "; ".join(v.message for v in verdicts), metrics)


def compare_patch(patch: Patch, models: Models, tolerances: dict[str, Tolerance], seed: int,
                  kinds=None) -> Verdict:
    """One verdict per patch: every (model kind it touches) x (dtype) cell within tolerance."""
    prefix = patch.name.split(":")[0]
    own = [RULE_COMPARISONS[prefix](patch, tolerances, seed)] if prefix in RULE_COMPARISONS else []
    if prefix in BUILT_PREFIXES:
        own.append(compare_built(patch, tolerances, seed, models.overrides if models is not None else None,
                                 stock=models.built_stock if models is not None else None))
    if own:
        return _together(own)
    name = f"patched-vs-stock:{patch.name}"
    applicable, reason = patch.applicable()
    if not applicable:
        return Verdict(name, Status.SKIP, f"not applicable: {reason}")
    touched = kinds_touched(patch, models, kinds or ("text", "vl", "moe"))
    if not touched:
        return Verdict(name, Status.SKIP, "not exercised: no tiny model of the zoo runs through its target")
    stock_probe, patched_probe = _probes(patch)
    metrics, failures = {}, []
    for kind in touched:
        for dtype, tol in tolerances.items():
            model = models.get(kind, dtype)
            inputs = model_inputs(model, kind, seed)
            want, want_grads = models.stock(stock_probe, kind, dtype, seed)
            with patch.applied_context():
                got, got_grads = patched_probe(model, inputs, seed)
            cell = {f"{key}_max_abs_err": max_abs(got[key], want[key]) for key in want}
            cell["grad_rel_err"], worst_grad = grad_error(want_grads, got_grads)
            metrics[f"{kind}/{dtype}"] = cell
            output_err = worst(v for k, v in cell.items() if k.endswith("_max_abs_err"))
            if not output_err <= tol.output:  # NaN fails
                failures.append(f"{kind}/{dtype}: output error {output_err:.3g} > {tol.output:g}")
            if not cell["grad_rel_err"] <= tol.grad:
                failures.append(f"{kind}/{dtype}: gradient error {cell['grad_rel_err']:.3g} > {tol.grad:g} "
                                f"({worst_grad})")
    if failures:
        return Verdict(name, Status.FAIL, "; ".join(failures), metrics)
    return Verdict(name, Status.PASS, f"matches stock on {', '.join(touched)} in {', '.join(tolerances)}", metrics)


def patched_vs_stock_verdicts(patches: list[Patch], models: Models, tolerances: dict[str, Tolerance],
                              seed: int = 0, kinds=None) -> list[Verdict]:
    return [compare_patch(p, models, tolerances, seed, kinds) for p in patches]
