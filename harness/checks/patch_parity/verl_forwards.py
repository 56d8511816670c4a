"""patch-parity in a row that installs verl: verl's Qwen3.5 forwards against stock transformers, called as verl's
FSDP engine calls the model (harness.checks.support.verl_engine).

For each model type verl dispatches on (qwen3_5, qwen3_5_moe, qwen3_5_text), on one tiny model:
  stock     transformers' own forward, each sequence alone, before any patch: the reference;
  packed    verl's apply_monkey_patch, then verl's engine step with use_remove_padding on the micro-batch verl's
            helpers make (the model gets one row of all tokens, position ids and, where the patched forward takes
            them, cu_seqlens, which verl's decoder layers hand to its gated delta net forward);
  padded    the same step without remove-padding (a (B, S) batch with its attention mask);
  fallback  the packed step again with each gated delta net's chunk rule behind an explicit signature (no
            **kwargs), so verl's `_call_accepts_kwarg` answers no and verl runs its per-sequence fallback.
The gated delta net's chunk rule is watched in every step (calls, and whether cu_seqlens reached it), without
changing its signature: what verl decides is what it decides unwatched.

Verdicts, per model type:
  verl:<type>/packed    next-token log-probs of the packed step against stock, max abs error within tolerance;
  verl:<type>/padded    the same for the padded step;
  verl:<type>/gdn-path  (the types verl patches) which packed path verl's gated delta net took: cu_seqlens handed
                        to the chunk rule, or verl's per-sequence fallback; fails where that path mixes sequences,
                        with the forced fallback's error as evidence of whether the kernel or the fallback is at fault.
A step that cannot run on this runner (verl code importing a package only accelerators have) is a skip naming the
file and line. verl code that fails (a patch that does not import on a transformers outside verl's range) fails.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from typing import Any

from harness.checks.support import verl, verl_engine
from harness.results.records import Status, Verdict

CASES = (("packed", True, False), ("padded", False, False), ("fallback", True, True))  # name, remove-padding, forced


def stock_logprobs(model, rows: list[dict[str, Any]], device) -> list:
    """Stock transformers, one sequence at a time: log p(x[t+1] | x[..t]) for t < L-1."""
    import torch

    out = []
    with torch.no_grad():
        for row in rows:
            ids = row["input_ids"][None].to(device)
            extra = {}
            if "pixel_values" in row:
                extra = {"pixel_values": row["pixel_values"].to(device),
                         "image_grid_thw": row["image_grid_thw"].to(device),
                         "mm_token_type_ids": (ids == model.config.image_token_id).int()}
            logits = model(input_ids=ids, use_cache=False, **extra).logits[0].float()
            out.append(torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0].cpu())
    return out


def _name(fn) -> str:
    target = getattr(fn, "__func__", fn)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"


@contextlib.contextmanager
def chunk_rule_watched(model, explicit: bool) -> Iterator[dict[str, Any]]:
    """Count the calls of every gated delta net's chunk rule (an instance attribute) and whether cu_seqlens reached
    it. The watcher keeps the rule's signature (functools.wraps: inspect follows __wrapped__); with `explicit` it
    is an explicit signature without **kwargs instead, which makes verl take its per-sequence fallback."""
    layers = [m for m in model.modules() if "chunk_gated_delta_rule" in vars(m)]
    seen: dict[str, Any] = {"rule": None, "calls": 0, "calls_with_cu_seqlens": 0, "layers": len(layers)}

    def watched(rule):
        if explicit:
            def rule_without_var_kwargs(query, key, value, g=None, beta=None, initial_state=None,
                                        output_final_state=False, use_qk_l2norm_in_kernel=False):
                seen["calls"] += 1
                return rule(query, key, value, g=g, beta=beta, initial_state=initial_state,
                            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
            return rule_without_var_kwargs

        @functools.wraps(rule)
        def counted(*args, **kwargs):
            seen["calls"] += 1
            seen["calls_with_cu_seqlens"] += kwargs.get("cu_seqlens") is not None
            return rule(*args, **kwargs)
        return counted

    saved = [vars(layer)["chunk_gated_delta_rule"] for layer in layers]
    for layer, rule in zip(layers, saved):
        seen["rule"] = _name(rule)
        layer.chunk_gated_delta_rule = watched(rule)
    try:
        yield seen
    finally:
        for layer, rule in zip(layers, saved):
            layer.chunk_gated_delta_rule = rule


def patched_forwards(model) -> list:
    """The verl functions apply_monkey_patch put on the classes of `model`'s modules."""
    found = []
    for cls in {type(m) for m in model.modules()}:
        for attribute in ("forward", "fast_pos_embed_interpolate"):
            fn = vars(cls).get(attribute)
            if fn is not None and getattr(fn, "__module__", "").startswith("verl.") and fn not in found:
                found.append(fn)
    return found


def _run_case(model, rows, remove_padding: bool, explicit: bool, reference: list, device) -> dict[str, Any]:
    import torch

    with chunk_rule_watched(model, explicit) as seen, torch.no_grad():
        td = verl_engine.micro_batch(model, rows, remove_padding)
        eng = verl_engine.engine(model)
        _, got = verl_engine.step(eng, td)
    errors = [float((a.double() - b.double()).abs().max()) for a, b in zip(reference, got, strict=True)]
    return {"max_abs_err": max(errors), "per_sequence": errors, "chunk_rule": seen,
            "engine_passes_cu_seqlens": eng.pass_packed_cu_seqlens}


def measure(model_type: str, seed: int, device) -> dict[str, Any]:
    """Every case of one model type (see the module docstring); a case that raised keeps its failure."""
    model = verl_engine.build_model(model_type, seed).to(device).train()  # dropout is 0; train() as verl trains
    rows = verl_engine.make_rows(model)
    reference = stock_logprobs(model, rows, device)
    out: dict[str, Any] = {"model_class": type(model).__name__}
    with verl_engine.patches_restored():
        try:
            verl_engine.apply_patch(model)
        except Exception as exc:  # noqa: BLE001 - verl's patch failing is the finding
            out.update(patch_failure=verl_engine.failure(exc), ran=[verl_engine.verl_functions()["apply_monkey_patch"]])
            return out
        out["patched"] = patched_forwards(model)
        out["ran"] = list(verl_engine.verl_functions().values()) + out["patched"]
        gated = any("chunk_gated_delta_rule" in vars(m) for m in model.modules())
        out["causal_conv1d_fn"] = next((repr(m.causal_conv1d_fn) for m in model.modules()
                                        if hasattr(m, "causal_conv1d_fn")), None)
        for name, remove_padding, explicit in CASES:
            if explicit and not (out["patched"] and gated):
                continue  # verl has no packed gated delta net of its own here: nothing to force
            try:
                out[name] = _run_case(model, rows, remove_padding, explicit, reference, device)
            except Exception as exc:  # noqa: BLE001 - verl's step failing is the finding (or cannot run here)
                out[name] = {"failure": verl_engine.failure(exc)}
    return out


def _failed(part: str, failure: dict[str, Any], ran: list) -> Verdict:
    if failure["cannot_run_here"]:
        return verl.verdict(part, Status.SKIP, f"cannot run on this runner: {failure['cannot_run_here']}", ran,
                            {"failure": failure})
    return verl.verdict(part, Status.FAIL, f"verl's code raised {failure['error_class']} at {failure['where']}: "
                        f"{failure['error']}", ran, {"failure": failure})


def _path(case: dict[str, Any]) -> str:
    rule = case["chunk_rule"]
    if rule["calls_with_cu_seqlens"]:
        return f"verl handed cu_seqlens to {rule['rule']} ({rule['calls_with_cu_seqlens']} calls)"
    if rule["calls"]:
        return f"verl called {rule['rule']} {rule['calls']} times without cu_seqlens"
    return "no gated delta net chunk rule was called"


def _leak_reason(model_type: str, measured: dict[str, Any], tolerance: float, short: bool = False) -> str:
    """Why the packed step differs from stock, from what the steps saw (`short`: one clause, for the packed verdict
    where the gdn-path verdict says the rest)."""
    packed, fallback = measured["packed"], measured.get("fallback")
    if not measured["patched"] or not packed["engine_passes_cu_seqlens"]:
        return (f"verl's apply_monkey_patch patches nothing for this model type ({model_type}); packed input mixes "
                "sequences: the engine passes no cu_seqlens and transformers' own forward runs over the packed row")
    exact_fallback = fallback is not None and "failure" not in fallback and fallback["max_abs_err"] <= tolerance
    if packed["chunk_rule"]["calls_with_cu_seqlens"] and exact_fallback:
        if short:
            return f"packed sequences mix: {_path(packed)}, which ignores them (see gdn-path)"
        fla = "" if importlib.util.find_spec("fla") else " (no flash-linear-attention here)"
        return (f"{_path(packed)}, which ignores them{fla}: the rule takes **kwargs, which verl's _call_accepts_kwarg "
                "counts as accepting cu_seqlens, so the gated delta net mixes the packed sequences; verl's own "
                f"per-sequence fallback, forced, keeps them apart ({fallback['max_abs_err']:.3g})")
    return f"packed sequences mix ({_path(packed)})"


def model_verdicts(model_type: str, measured: dict[str, Any], tolerance: float) -> list[Verdict]:
    """verl:<type>/packed, /padded and (where verl patches the gated delta net) /gdn-path from `measure`."""
    ran = measured["ran"]
    if "patch_failure" in measured:
        return [_failed(f"{model_type}/{name}", measured["patch_failure"], ran) for name in ("packed", "padded")]
    out = []
    for name in ("packed", "padded"):
        case, part = measured[name], f"{model_type}/{name}"
        if "failure" in case:
            out.append(_failed(part, case["failure"], ran))
            continue
        metrics = {k: case[k] for k in ("max_abs_err", "per_sequence", "chunk_rule", "engine_passes_cu_seqlens")}
        metrics["tolerance"] = tolerance
        if case["max_abs_err"] <= tolerance:
            message = (f"verl's {name} step gives the stock log-probs (max abs error {case['max_abs_err']:.3g}, "
                       f"tolerance {tolerance:g})")
            out.append(verl.verdict(part, Status.PASS, message, ran, metrics))
            continue
        bad = [i + 1 for i, e in enumerate(case["per_sequence"]) if e > tolerance]
        why = "padded log-probs differ" if name == "padded" else _leak_reason(model_type, measured, tolerance, True)
        out.append(verl.verdict(part, Status.FAIL, f"{why} (max abs log-prob error {case['max_abs_err']:.3g} > "
                                f"{tolerance:g}, sequences {bad})", ran, metrics))
    packed, fallback = measured["packed"], measured.get("fallback")
    if "failure" not in packed and fallback is not None:
        out.append(_gdn_path(model_type, measured, tolerance, ran))
    return out


def _gdn_path(model_type: str, measured: dict[str, Any], tolerance: float, ran: list) -> Verdict:
    packed, fallback = measured["packed"], measured["fallback"]
    conv = ("verl's per-sequence causal conv fallback (transformers' causal_conv1d_fn is None)"
            if measured["causal_conv1d_fn"] in (None, "None") else f"causal_conv1d_fn {measured['causal_conv1d_fn']}")
    forced = (f"error {fallback['failure']['error_class']}" if "failure" in fallback
              else f"max abs error {fallback['max_abs_err']:.3g} with {_path(fallback)}")
    metrics = {"packed": {k: packed[k] for k in ("max_abs_err", "chunk_rule")}, "conv": conv, "tolerance": tolerance,
               "fallback_forced": fallback.get("failure") or {k: fallback[k] for k in ("max_abs_err", "chunk_rule")}}
    if packed["max_abs_err"] <= tolerance:
        return verl.verdict(f"{model_type}/gdn-path", Status.PASS, f"{_path(packed)}; {conv}: sequences kept apart "
                            f"(forced per-sequence fallback: {forced})", ran, metrics)
    return verl.verdict(f"{model_type}/gdn-path", Status.FAIL, f"{_leak_reason(model_type, measured, tolerance)}; "
                        f"{conv} (packed max abs error {packed['max_abs_err']:.3g}; forced per-sequence fallback: "
                        f"{forced})", ran, metrics)


def verl_verdicts(seed: int, tolerance: float) -> list[Verdict]:
    """Every verl verdict of patch-parity in this row. On a CPU verl's device is named through its platform registry
    (support.verl.use_cpu_platform); on an accelerator the models run there, where verl's forward_step moves the
    micro-batch."""
    from trainers.models import Qwen35Unavailable
    from trainers.runtime.device import plan

    device_plan = plan()
    if device_plan.type == "cpu":
        verl.use_cpu_platform()
    verdicts = []
    for model_type in verl_engine.MODEL_TYPES:
        try:
            measured = measure(model_type, seed, device_plan.device(0))
        except Qwen35Unavailable:
            continue
        verdicts += model_verdicts(model_type, measured, tolerance)
    return verdicts
