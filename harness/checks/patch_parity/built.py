"""Parity of a patch whose target a layer binds when it is built: a model built under the patch
against the same model built without it.

Transformers 5.2-5.9 bind the Gated DeltaNet conv functions and recurrent rule to each layer at build
(the optional packages' slots, or the torch fallbacks), so swapping the module attribute under a
built model would compare stock with stock; from 5.16 the layer looks them up at call time. Built
under the patch, the model runs the patched code in every release. Two probes, each on both
models with the same seeded weights:
- training: the logits of a forward without a cache, and every parameter's gradient of a fixed
  random projection of them (the conv's backward included);
- decoding: `generate` with the KV cache, forced through the same tokens on both sides (so a
  rounding-level difference cannot fork the paths), comparing the raw logits of every step:
  the prefill conv that fills the cache, then the one-token conv update and recurrent step.
The patches compared here (causal-conv1d*, gated-delta-step) target the Gated DeltaNet layer shared
by the text and vision-language models of a module, so the text model stands for `qwen3_5` and the MoE model for
`qwen3_5_moe`.
"""
from __future__ import annotations

import torch

from harness.checks.patch_parity.inputs import DTYPES, Tolerance, cotangent, grad_error, gradients, max_abs
from harness.results.records import Status, Verdict
from trainers.patches.base import Patch, split_target

PROMPT, NEW_TOKENS = 6, 5
KIND_OF_MODULE = {"qwen3_5": "text", "qwen3_5_moe": "moe"}


class ForcedTokens:
    """A logits processor that makes greedy decoding pick the given token at each step."""

    def __init__(self, tokens: torch.Tensor, prompt_width: int):
        self.tokens, self.prompt_width = tokens, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_width
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter(1, self.tokens[:, step:step + 1], 0.0)


def _build(kind: str, dtype: str, overrides: dict | None, seed: int):
    from trainers.models import build_model

    model = build_model(kind, overrides, seed=seed)
    model.config._attn_implementation = "sdpa"
    return model.to(DTYPES[dtype]).train()


def _inputs(vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 17)
    train = torch.randint(3, vocab, (2, 20), generator=gen)
    return train, train[:, :PROMPT].clone(), torch.randint(3, vocab, (2, NEW_TOKENS), generator=gen)


def _probe(model, train_ids, prompt, forced, seed: int) -> dict[str, torch.Tensor | dict]:
    from transformers import LogitsProcessorList

    logits = model(input_ids=train_ids, use_cache=False).logits
    (logits.float() * cotangent(logits.shape, seed + 1)).sum().backward()
    out = {"train_logits": logits.detach(), "grads": gradients(model)}
    model.eval()
    with torch.no_grad():
        generated = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, use_cache=True, output_logits=True,
            return_dict_in_generate=True, logits_processor=LogitsProcessorList([ForcedTokens(forced, PROMPT)]),
            pad_token_id=0, eos_token_id=None, temperature=None, top_p=None, top_k=None)
    model.train()
    out["decode_logits"] = torch.stack(generated.logits, dim=1).float()
    out["decode_tokens"] = generated.sequences[:, PROMPT:]
    return out


def _stock_side(kind: str, dtype: str, overrides: dict | None, seed: int) -> tuple[dict, tuple]:
    """What the model built without any patch computes, and the inputs it computed it on."""
    stock_model = _build(kind, dtype, overrides, seed)
    inputs = _inputs(getattr(stock_model.config, "text_config", stock_model.config).vocab_size, seed)
    return _probe(stock_model, *inputs, seed), inputs


def compare_built(patch: Patch, tolerances: dict[str, Tolerance], seed: int, overrides: dict | None = None,
                  kind: str | None = None, stock: dict | None = None) -> Verdict:
    """`stock`: where the stock side is kept between patches (patch_parity.inputs.Models.built_stock): every patch
    built against the same kind, dtype and seed compares with the same model built without a patch, so it is built
    and probed once; None computes it here."""
    name = f"patched-vs-stock:{patch.name}"
    applicable, reason = patch.applicable()
    if not applicable:
        return Verdict(name, Status.SKIP, f"not applicable: {reason}")
    kind = kind or KIND_OF_MODULE[split_target(patch.target)[0].rsplit(".", 1)[-1].removeprefix("modeling_")]
    overrides = (overrides or {}).get(kind)
    stock = {} if stock is None else stock
    metrics, failures = {}, []
    for dtype, tol in tolerances.items():
        if (kind, dtype, seed) not in stock:
            stock[(kind, dtype, seed)] = _stock_side(kind, dtype, overrides, seed)
        want, (train_ids, prompt, forced) = stock[(kind, dtype, seed)]
        with patch.applied_context():
            got = _probe(_build(kind, dtype, overrides, seed), train_ids, prompt, forced, seed)
        if not torch.equal(got["decode_tokens"], forced) or not torch.equal(want["decode_tokens"], forced):
            failures.append(f"{kind}/{dtype}: decoding did not follow the forced tokens")
        cell = {"train_logits_max_abs_err": max_abs(got["train_logits"], want["train_logits"]),
                "decode_logits_max_abs_err": max_abs(got["decode_logits"], want["decode_logits"])}
        cell["grad_rel_err"], worst = grad_error(want["grads"], got["grads"])
        metrics[f"{kind}/{dtype}"] = cell
        for probe in ("train", "decode"):
            error = cell[f"{probe}_logits_max_abs_err"]
            if not error <= tol.output:  # NaN fails
                failures.append(f"{kind}/{dtype}: {probe} logits error {error:.3g} > {tol.output:g}")
        if not cell["grad_rel_err"] <= tol.grad:
            failures.append(f"{kind}/{dtype}: gradient error {cell['grad_rel_err']:.3g} > {tol.grad:g} ({worst})")
    if failures:
        return Verdict(name, Status.FAIL, "; ".join(failures), metrics)
    return Verdict(name, Status.PASS, f"a {kind} model built under the patch matches one built without it "
                   f"(training logits and gradients, cached decoding) in {', '.join(tolerances)}", metrics)
