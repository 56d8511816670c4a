"""The rank side of Megatron-Bridge's own Qwen3.5 bridges in bridge-parity (one rank: TP=1, EP=1).

Per model (text-hybrid: Qwen35Bridge, moe-hybrid: Qwen35MoEBridge) everything that converts is
Megatron-Bridge's: the tiny HF model is saved to a folder, `AutoBridge.from_hf_pretrained` picks the
bridge, its `to_megatron_provider` translates the config, the provider's `provide_distributed_model`
builds megatron-core's GPTModel, `load_hf_weights` loads and `export_hf_weights` exports. This module
only measures:
- roundtrip: the exported tensors against the checkpoint it read (transformers' saved layout), bitwise;
- logprobs: log-probs of ranks.batch's left-padded rows, against HF's;
- grads: the same loss through both; HF's gradients carried into Megatron's layout by the path its
  weights take (saved as a checkpoint, loaded by Megatron-Bridge), less what that path gives for zeros
  (the GDN out_norm mapping subtracts 1), against Megatron's own gradients;
- project: the Megatron weights Megatron-Bridge loaded against those of the project mapping
  (trainers/megatron/mapping.py) from the same HF weights, tensor by tensor (te_layout.project_name).
On CPU the provider gets the settings in `cpu_overrides` (each with the code that needs it), recorded
per result; the comparison itself needs `COMPARISON` (HF's loss has no MoE auxiliary loss).
`--break` pieces (tests): mb-perturb (a weight changed after loading), mb-drop (the export loses a
tensor), mb-mapping (A_log and dt_bias exchanged in Megatron-Bridge's mapping, both ways), mb-grad
(Megatron's A_log gradients doubled).
"""
from __future__ import annotations

import importlib.metadata
import time
import traceback
from pathlib import Path

# case -> (zoo model kind, the bridge class Megatron-Bridge must pick)
CASES = {"text-hybrid": ("text", "Qwen35Bridge"), "moe-hybrid": ("moe", "Qwen35MoEBridge")}
BREAKS = ("mb-perturb", "mb-drop", "mb-mapping", "mb-grad")
COMPARISON = {"moe_router_load_balancing_type": "none", "moe_aux_loss_coeff": 0.0, "parallel_output": False}


def cpu_overrides() -> dict:
    """{provider field: (value, why)} for a CPU rank."""
    from trainers.megatron.kernel_shim import fla_available

    from . import te_layout

    return {
        "transformer_impl": ("local", "the provider's block spec (megatron-core's experimental attention variant "
                             "spec) asserts transformer_impl == 'transformer_engine'"),
        "transformer_layer_spec": (te_layout.block_spec, "TE's layer layout from megatron-core's local modules "
                                   "(bridge_parity/te_layout.py)"),
        "moe_grouped_gemm": (False, "grouped-GEMM experts are Transformer Engine's"),
        "moe_permute_fusion": (False, "Transformer Engine's fused permutation"),
        "moe_token_dispatcher_type": ("allgather", "MoEAlltoAllTokenDispatcher.__init__ creates a torch.cuda.Stream "
                                      "(megatron/core/transformer/moe/token_dispatcher.py)"),
        "masked_softmax_fusion": (False, "a CUDA kernel"),
        "deterministic_mode": (not fla_available(), "megatron-core's pure-torch gated delta rule where "
                               "flash-linear-attention is absent"),
    }


def _apply(provider, on_cpu: bool) -> dict:
    import torch

    settings = {**({k: v for k, (v, _) in cpu_overrides().items()} if on_cpu else {}), **COMPARISON,
                "autocast_dtype": torch.float32}
    recorded = {}
    for key, value in settings.items():
        recorded[key] = {"from": repr(getattr(provider, key, None))[:80], "to": getattr(value, "__name__", repr(value))}
        setattr(provider, key, value)
    if on_cpu:
        for key, (_, why) in cpu_overrides().items():
            recorded[key]["why"] = why
    return recorded


def _checkpoint(folder: Path) -> dict:
    from safetensors.torch import load_file

    state = {}
    for file in sorted(folder.glob("*.safetensors")):
        state.update(load_file(file))
    return state


def _corrupt_mapping(bridge_class) -> None:
    """mb-mapping: A_log and dt_bias exchanged in the bridge's own registry (load and export alike)."""
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    right = bridge_class.mapping_registry
    swap = {"linear_attn.A_log": "linear_attn.dt_bias", "linear_attn.dt_bias": "linear_attn.A_log"}

    def corrupted(self):
        mappings = []
        for m in right(self).mappings:
            hf = getattr(m, "hf_param", None)
            tail = next((k for k in swap if isinstance(hf, str) and hf.endswith(k)), None)
            mappings.append(AutoMapping(m.megatron_param, hf[: -len(tail)] + swap[tail]) if tail else m)
        return MegatronMappingRegistry(*mappings)

    bridge_class.mapping_registry = corrupted


def _build(folder: Path, bridge, on_cpu: bool):
    provider = bridge.to_megatron_provider(load_weights=False)
    overrides = _apply(provider, on_cpu)
    provider.finalize()
    model = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True,
                                               mixed_precision_wrapper=None, fp16=False, bf16=False)
    return model, overrides


def compare(case: str, seed: int, broken: str | None, work: Path, on_cpu: bool = True) -> dict:
    """One model through Megatron-Bridge's bridge on this (only) rank."""
    import torch
    from megatron.bridge import AutoBridge

    from trainers.megatron.bridge import megatron_state
    from trainers.megatron.model import build_hf_variant, megatron_logits
    from trainers.rollout import positions_from_mask

    from .ranks import batch

    started = time.perf_counter()
    kind, expected = CASES[case]
    hf = build_hf_variant("hybrid", None, seed=seed, kind=kind).eval()
    folder = work / case
    hf.save_pretrained(folder)
    bridge = AutoBridge.from_hf_pretrained(str(folder), torch_dtype=torch.float32)
    bridge_class = type(bridge._model_bridge)
    out = {"bridge": f"megatron-bridge {importlib.metadata.version('megatron-bridge')} ({bridge_class.__name__})",
           "bridge_class": bridge_class.__name__, "expected_class": expected, "tp": 1, "ep": 1}
    if broken == "mb-mapping":
        _corrupt_mapping(bridge_class)
    models, out["overrides"] = _build(folder, bridge, on_cpu)
    model = models[0]
    bridge.load_hf_weights(models)
    if broken == "mb-perturb":
        with torch.no_grad():
            next(p for n, p in model.named_parameters() if n.endswith("linear_proj.weight")).add_(1e-2)

    checkpoint = _checkpoint(folder)
    exported = {name: tensor.clone()
                for name, tensor in bridge.export_hf_weights(models, cpu=True, show_progress=False)}
    if broken == "mb-drop":
        exported.pop(sorted(exported)[0])
    out["roundtrip_compared"] = len(checkpoint)
    out["roundtrip_mismatched"] = sorted(k for k in checkpoint if k not in exported
                                         or not torch.equal(exported[k], checkpoint[k]))
    out["roundtrip_extra"] = sorted(set(exported) - set(checkpoint))

    out.update(_against_project(hf, megatron_state(model)))

    padding_idx = hf.get_input_embeddings().padding_idx
    ids, mask = batch(hf.config.vocab_size, seed, padding_idx or 0)
    model.eval()
    with torch.no_grad():
        hf_lp = torch.log_softmax(hf(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                                     use_cache=False).logits.float(), -1)
        mc_lp = torch.log_softmax(megatron_logits(model, ids, mask).float(), -1)
    real = mask.bool()
    out["max_abs_logprob_error"] = float((hf_lp - mc_lp)[real].abs().max())
    out["finite"] = bool(torch.isfinite(mc_lp[real]).all())
    out.update(_gradients(hf, models, bridge, ids, mask, padding_idx, work / f"{case}-grads", broken))
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _against_project(hf, library: dict) -> dict:
    """The project mapping's Megatron tensors against Megatron-Bridge's, in TE's layout names."""
    from trainers.megatron import mapping

    from .te_layout import project_name

    project = mapping.hf_to_megatron({k: v.detach() for k, v in hf.state_dict().items()}, hf.config, 1, 0, 1, 0)
    worst, mismatched, matched = 0.0, [], set()
    for name, value in project.items():
        te_name, offset = project_name(name, library)
        if te_name is None:
            continue
        matched.add(te_name)
        # the project's GDN out_norm is plain (x * w); Megatron-Bridge stores it zero-centred (x * (1 + w))
        diff = float((value.float() - (library[te_name].float() + offset)).abs().max()) if value.numel() else 0.0
        if value.shape != library[te_name].shape or diff > 0.0:
            mismatched.append(name)
            worst = max(worst, diff if value.shape == library[te_name].shape else float("inf"))
    return {"project_compared": len(matched), "project_mismatched": sorted(mismatched)[:20],
            "project_max_abs_diff": worst,
            "project_unmatched": sorted([n for n in project if project_name(n, library)[0] is None]
                                        + [n for n in library if n not in matched])[:20]}


def _save_as_checkpoint(hf, values: dict, folder: Path) -> None:
    import torch

    with torch.no_grad():
        for name, parameter in hf.named_parameters():
            parameter.copy_(values[name])
    hf.save_pretrained(folder)


def _gradients(hf, models, bridge, ids, mask, padding_idx, folder: Path, broken) -> dict:
    import torch

    from trainers.megatron.bridge import megatron_state
    from trainers.megatron.grads import zero_padding_row
    from trainers.megatron.model import megatron_logits
    from trainers.rollout import positions_from_mask

    from .ranks import next_token_logprobs

    model = models[0]
    hf.zero_grad(set_to_none=True)
    logprobs, valid = next_token_logprobs(hf(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                                             use_cache=False).logits, ids, mask)
    (-(logprobs * valid).sum() / valid.sum()).backward()
    model.train()
    model.zero_grad(set_to_none=True)
    local, local_valid = next_token_logprobs(megatron_logits(model, ids, mask), ids, mask)
    (-(local * local_valid).sum() / local_valid.sum()).backward()
    model.eval()
    zero_padding_row(model, padding_idx)
    got = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
           for n, p in model.named_parameters()}
    if broken == "mb-grad":
        got = {n: g * 2 if n.endswith("A_log") else g for n, g in got.items()}
    hf_grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
                for n, p in hf.named_parameters()}
    # HF's gradients the way its weights travel: transformers' checkpoint, Megatron-Bridge's load
    _save_as_checkpoint(hf, hf_grads, folder / "grads")
    _save_as_checkpoint(hf, {n: torch.zeros_like(g) for n, g in hf_grads.items()}, folder / "zeros")
    bridge.load_hf_weights(models, hf_path=str(folder / "grads"))
    carried = {n: t.detach().clone() for n, t in megatron_state(model).items()}
    bridge.load_hf_weights(models, hf_path=str(folder / "zeros"))
    offsets = megatron_state(model)
    errors = {}
    for name, grad in got.items():
        want = carried[name] - offsets[name]
        errors[name] = float((grad - want).abs().max()) / (float(want.abs().max()) or 1.0)
    worst = max(errors, key=errors.get)
    return {"max_rel_grad_error": errors[worst], "worst_grad": worst, "grads_compared": len(errors)}


def vl_reason() -> dict:
    """Why Qwen35VLBridge's model is not built on a CPU runner, read from the installed provider: the lines
    of its vision-encoder spec that name Transformer Engine modules (no local alternative is offered)."""
    import inspect
    import re

    try:
        from megatron.bridge.models.qwen_vl import qwen35_vl_bridge, qwen35_vl_provider

        qwen35_vl_bridge.Qwen35VLBridge  # noqa: B018  (the bridge itself imports)
        builder = qwen35_vl_provider._qwen35_build_vision_encoder_spec
        lines, start = inspect.getsourcelines(builder)
        path = "megatron/bridge/" + inspect.getsourcefile(builder).replace("\\", "/").split("/megatron/bridge/", 1)[1]
    except Exception as exc:  # noqa: BLE001 - a release that moved it: say so instead of guessing
        return {"reason": f"the VL provider's vision spec could not be read ({type(exc).__name__}: {exc})"}
    where = [f"{path} line {start + i}: `{line.strip()}`" for i, line in enumerate(lines)
             if re.search(r"transformer_engine|\bTE[A-Z]\w+", line)]
    if not where:
        return {"reason": f"{path} builds the vision tower without Transformer Engine here; not yet driven",
                "where": []}
    return {"reason": f"its vision tower is built only from Transformer Engine modules ({where[0]}; "
                      f"{len(where)} such lines in {builder.__name__}), which have no CPU build; the GPU evidence "
                      "run covers it", "where": where}


def run(cases: list[str], seed: int, broken: str | None, work: Path, on_cpu: bool = True) -> dict:
    """{"import": ..., case: result or {"error"}} on this rank; the TE stand-in installed first where needed."""
    from . import te_import

    te_import.install()
    results: dict = {}
    try:
        import megatron.bridge  # noqa: F401  (the import itself is what a CPU runner could not do before)
    except Exception as exc:  # noqa: BLE001 - its own error (and line) is the finding
        from .megatron_bridge import raising_line

        results["import"] = {"error": f"{type(exc).__name__}: {exc}", "where": raising_line(exc), **te_import.record()}
        return results
    results["import"] = {"error": None, **te_import.record()}
    work.mkdir(parents=True, exist_ok=True)
    results["vl"] = vl_reason()
    for case in cases:
        try:
            results[case] = compare(case, seed, broken, work, on_cpu)
        except Exception as exc:  # Megatron-Bridge's (or megatron-core's) own error is the evidence
            traceback.print_exc()
            results[case] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    return results
