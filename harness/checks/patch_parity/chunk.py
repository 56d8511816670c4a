"""Parity of the fitted Gated DeltaNet chunk: the patched rule against the stock one, called directly.

The target is a module-level function that transformers 5.2-5.9 bind to each layer when the layer
is built, so swapping it under an already built model would compare stock with stock. The rule
is compared where it is defined instead, on random inputs of lengths that straddle the fitted
chunk sizes (shorter than, equal to and longer than a chunk, and the stock 64), with outputs,
final states and the gradients of every input.
"""
from __future__ import annotations

import torch

from harness.checks.patch_parity.inputs import DTYPES, Tolerance, cotangent, max_abs
from harness.results.records import Status, Verdict
from trainers.patches.base import Patch, resolve
from trainers.worst import worst

LENGTHS = (5, 14, 16, 30, 64, 100)
HEADS, HEAD_DIM = 2, 8


def _inputs(length: int, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed * 1009 + length)
    shape = (2, length, HEADS, HEAD_DIM)
    tensors = {"query": torch.randn(shape, generator=gen), "key": torch.randn(shape, generator=gen),
               "value": torch.randn(shape, generator=gen),
               "g": -torch.rand((2, length, HEADS), generator=gen),  # log-decay: <= 0
               "beta": torch.rand((2, length, HEADS), generator=gen)}
    return {k: v.to(dtype).requires_grad_(True) for k, v in tensors.items()}


def _run(rule, inputs: dict[str, torch.Tensor], seed: int):
    out, state = rule(inputs["query"], inputs["key"], inputs["value"], g=inputs["g"], beta=inputs["beta"],
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    ((out.float() * cotangent(out.shape, seed + 1)).sum() + (state.float() * cotangent(state.shape, seed + 2)).sum()
     ).backward()
    # None where no gradient reaches an input: a rule that cuts one off must fail, not crash.
    grads = {k: None if v.grad is None else v.grad.detach().float() for k, v in inputs.items()}
    for v in inputs.values():
        v.grad = None
    return out.detach().float(), state.detach().float(), grads


def _grad_error(got: dict, want: dict) -> tuple[float, list[str]]:
    """Largest gradient difference, and the inputs whose gradient is missing on one side only."""
    cut = [k for k in want if (got[k] is None) != (want[k] is None)]
    errors = [max_abs(got[k], want[k]) for k in want if got[k] is not None and want[k] is not None]
    return worst(errors, default=0.0), cut


def compare_rule(patch: Patch, tolerances: dict[str, Tolerance], seed: int) -> Verdict:
    name = f"patched-vs-stock:{patch.name}"
    applicable, reason = patch.applicable()
    if not applicable:
        return Verdict(name, Status.SKIP, f"not applicable: {reason}")
    owner, attr = resolve(patch.target)
    metrics, failures = {}, []
    for dtype, tol in tolerances.items():
        for length in LENGTHS:
            inputs = _inputs(length, DTYPES[dtype], seed)
            want_out, want_state, want_grads = _run(getattr(owner, attr), inputs, seed)
            with patch.applied_context():
                got_out, got_state, got_grads = _run(getattr(owner, attr), inputs, seed)
            scale = worst((float(g.abs().max()) for g in want_grads.values() if g is not None), default=0.0) or 1.0
            grad_err, cut = _grad_error(got_grads, want_grads)
            cell = {"output_max_abs_err": worst([max_abs(got_out, want_out), max_abs(got_state, want_state)]),
                    "grad_rel_err": grad_err / scale}
            metrics[f"L{length}/{dtype}"] = cell
            if cut:
                failures.append(f"length {length}/{dtype}: gradient of {', '.join(cut)} missing on one side")
            if not cell["output_max_abs_err"] <= tol.output:  # NaN fails
                failures.append(f"length {length}/{dtype}: output error {cell['output_max_abs_err']:.3g} "
                                f"> {tol.output:g}")
            if not cell["grad_rel_err"] <= tol.grad:
                failures.append(f"length {length}/{dtype}: gradient error {cell['grad_rel_err']:.3g} > {tol.grad:g}")
    if failures:
        return Verdict(name, Status.FAIL, "; ".join(failures), metrics)
    return Verdict(name, Status.PASS, f"matches the stock rule on lengths {', '.join(map(str, LENGTHS))} "
                   f"in {', '.join(tolerances)}", metrics)
