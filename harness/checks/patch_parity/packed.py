"""Packed against unpacked: a packed row must give each sequence the numbers it gets alone.

The trainer's path (packed-forward patches applied, fused log-probs of a packed row) is
compared with each sequence run alone through stock transformers: per-token log-probs,
entropies and the gradients of a loss on them. Lengths include ones that are not multiples
of the Gated DeltaNet chunk size (64), where a leak would sit in a padded chunk.

Also recorded, as a report on upstream: what stock transformers does with the same packed
row, signalled with flash-attention style kwargs (cu_seq_lens_*, seq_idx) or with restarting
position ids alone.
"""
from __future__ import annotations

import contextlib

import torch

from harness.checks.patch_parity.inputs import Models, Tolerance, cotangent, grad_error, gradients, max_abs, text_config
from harness.results.records import Status, Verdict
from trainers.patches import packed_forward
from trainers.patches.base import Patch
from trainers.patches.fused_logprob import logprobs_and_entropy, reference_logprobs_and_entropy
from trainers.worst import worst

LENGTHS = (7, 64, 65, 130)
# How a stock forward that raises on packed inputs is told apart from a harness bug: these
# exception types are how transformers refuses inputs; anything else propagates.
REFUSALS = (ValueError, NotImplementedError, RuntimeError)


def random_sequences(model, lengths, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    config = text_config(model)
    high = min(config.vocab_size, getattr(model.config, "image_token_id", config.vocab_size))
    return [torch.randint(3, high, (n,), generator=gen) for n in lengths]


def within_sequence_labels(packed: packed_forward.PackedBatch) -> torch.Tensor:
    """Next-token targets of a packed row; -100 at each sequence's last token (no next token there)."""
    labels = torch.full_like(packed.input_ids, -100)
    for start, end in zip(packed.cu_seqlens[:-1].tolist(), packed.cu_seqlens[1:].tolist()):
        labels[0, start:end - 1] = packed.input_ids[0, start + 1:end]
    return labels


def _alone(model, sequences, seed: int):
    """Each sequence on its own through the stock model: log-probs, entropies, summed gradients."""
    logprobs, entropies, loss = [], [], 0.0
    for index, seq in enumerate(sequences):
        # Explicit positions: 5.3's VL model otherwise reuses the rope deltas of its previous call.
        positions = torch.arange(seq.numel())[None]
        logits = model(input_ids=seq[None], position_ids=positions, use_cache=False).logits[0, :-1]
        lp, ent = reference_logprobs_and_entropy(logits, seq[1:])
        loss = loss + (lp * cotangent(lp.shape, seed + index)).sum()
        loss = loss + (ent * cotangent(ent.shape, seed + 100 + index)).sum()
        logprobs.append(lp.detach())
        entropies.append(ent.detach())
    loss.backward()
    return logprobs, entropies, gradients(model)


def _packed(model, sequences, patches: list[Patch], seed: int):
    packed = packed_forward.pack_sequences(sequences)
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch.applied_context())
        with packed_forward.packed_segments(packed.cu_seqlens):
            lp, ent = logprobs_and_entropy(model, packed.input_ids, labels=within_sequence_labels(packed),
                                           **packed.model_kwargs())
            lp_parts = [part[:-1] for part in packed.split(lp[0], dim=0)]
            ent_parts = [part[:-1] for part in packed.split(ent[0], dim=0)]
            loss = sum((p * cotangent(p.shape, seed + i)).sum() + (e * cotangent(e.shape, seed + 100 + i)).sum()
                       for i, (p, e) in enumerate(zip(lp_parts, ent_parts)))
            loss.backward()  # inside the context: a recomputing backward must see the same boundaries
    return [p.detach() for p in lp_parts], [e.detach() for e in ent_parts], gradients(model)


def packed_vs_unpacked(models: Models, tolerances: dict[str, Tolerance], seed: int = 0, kinds=("text", "vl", "moe"),
                       lengths=LENGTHS, patches: list[Patch] | None = None) -> list[Verdict]:
    """One verdict per model kind; `patches` defaults to the applicable packed-forward patches."""
    if patches is None:
        patches = [p for p in packed_forward.PATCHES if p.applicable()[0]]
    verdicts = []
    for kind in kinds:
        metrics, failures = {"lengths": list(lengths), "patches": [p.name for p in patches]}, []
        for dtype, tol in tolerances.items():
            model = models.get(kind, dtype)
            sequences = random_sequences(model, lengths, seed)
            want_lp, want_ent, want_grads = _alone(model, sequences, seed)
            got_lp, got_ent, got_grads = _packed(model, sequences, patches, seed)
            per_seq = [worst([max_abs(g, w), max_abs(ge, we)])
                       for g, w, ge, we in zip(got_lp, want_lp, got_ent, want_ent)]
            grad_err, worst_grad = grad_error(want_grads, got_grads)
            metrics[dtype] = {"max_abs_err_per_sequence": per_seq, "grad_rel_err": grad_err}
            if not worst(per_seq) <= tol.output:  # NaN fails
                bad = [n for n, e in zip(lengths, per_seq) if not e <= tol.output]
                failures.append(f"{dtype}: sequences of length {bad} differ from running alone "
                                f"(max {worst(per_seq):.3g} > {tol.output:g})")
            if not grad_err <= tol.grad:
                failures.append(f"{dtype}: gradient error {grad_err:.3g} > {tol.grad:g} ({worst_grad})")
        name = f"packed-vs-unpacked:{kind}"
        if failures:
            verdicts.append(Verdict(name, Status.FAIL, "; ".join(failures), metrics))
        else:
            verdicts.append(Verdict(name, Status.PASS, f"packed lengths {list(lengths)} match each run alone", metrics))
    return verdicts


def _stock_packed_outcome(model, sequences, kwargs_mode: bool, use_cache: bool, tol: float) -> dict:
    packed = packed_forward.pack_sequences(sequences)
    kwargs = {"position_ids": packed.position_ids, "use_cache": use_cache}
    if kwargs_mode:
        seq_idx = torch.repeat_interleave(torch.arange(len(sequences)), torch.tensor(packed.lengths))
        kwargs.update(packed.model_kwargs(), seq_idx=seq_idx[None].to(torch.int32))
    with torch.no_grad():
        alone = [model(input_ids=s[None], use_cache=False).logits[0] for s in sequences]
        try:
            logits = model(input_ids=packed.input_ids, **kwargs).logits[0]
        except REFUSALS as exc:
            return {"outcome": "refuses", "exception": type(exc).__name__}
    errors = [max_abs(part, ref) for part, ref in zip(packed.split(logits, dim=0), alone)]
    return {"outcome": "keeps apart" if worst(errors) <= tol else "leaks", "max_logit_err_per_sequence": errors}


def stock_upstream_verdicts(models: Models, tol: Tolerance, seed: int = 0, lengths=LENGTHS) -> list[Verdict]:
    """Upstream (no patch applied): does stock transformers keep packed sequences apart on this machine?"""
    import transformers

    model = models.get("text", "float32")
    sequences = random_sequences(model, lengths, seed)
    version = transformers.__version__
    verdicts = []
    for name, kwargs_mode, how in (
            ("packed-stock-upstream", True, "cu_seq_lens_q/k, max_length_q/k and seq_idx"),
            ("packed-stock-upstream-position-ids", False, "restarting position ids alone")):
        metrics = {"signalled_by": how, "lengths": list(lengths), "transformers": version}
        metrics["no_cache"] = _stock_packed_outcome(model, sequences, kwargs_mode, False, tol.output)
        metrics["with_cache"] = _stock_packed_outcome(model, sequences, kwargs_mode, True, tol.output)
        outcome = metrics["no_cache"]
        if outcome["outcome"] == "leaks":
            largest = worst(outcome["max_logit_err_per_sequence"])
            verdicts.append(Verdict(name, Status.AFFECTED, f"stock transformers {version} with {how} leaks state "
                                    f"across packed sequences (max logit error {largest:.3g})", metrics))
        elif outcome["outcome"] == "refuses":
            # Refusing is safe (nothing silently wrong) but leaves nothing to measure here: SKIP, not
            # AFFECTED (no leak reproduced) and not PASS (packed training cannot run on this stack).
            verdicts.append(Verdict(name, Status.SKIP, f"stock transformers {version} refuses packed sequences "
                                    f"signalled by {how} ({outcome['exception']}) without the "
                                    "flash-linear-attention / causal-conv1d kernels: nothing to measure", metrics))
        else:
            verdicts.append(Verdict(name, Status.PASS, f"stock transformers {version} keeps packed sequences "
                                    f"apart with {how}", metrics))
    return verdicts
