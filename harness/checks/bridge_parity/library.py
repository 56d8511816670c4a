"""The rank side of Megatron-Bridge's own Qwen3.5 bridges in bridge-parity, on a job's ranks (TP=1, TP=2, EP=2).

Per model (text-hybrid: Qwen35Bridge, moe-hybrid: Qwen35MoEBridge) everything that converts is
Megatron-Bridge's: the tiny HF model is saved to a folder, `AutoBridge.from_hf_pretrained` picks the
bridge, its `to_megatron_provider` translates the config, the provider's `provide_distributed_model`
builds megatron-core's GPTModel, `load_hf_weights` loads and `export_hf_weights` exports. This module
only measures. Megatron-Bridge's conversion:
- roundtrip: the exported tensors against the checkpoint it read (transformers' saved layout), bitwise;
- project: the Megatron weights Megatron-Bridge loaded against those of the project mapping
  (trainers/megatron/mapping.py) from the same HF weights, tensor by tensor (te_layout.project_name); NaN
  counts as a difference.
- mtp (MTP on, `mtp_round_trip`): the same model saved with one MTP layer (trainers/mtp.py), built by the
  provider with its MTP block, loaded and exported by Megatron-Bridge; every tensor, MTP included, against the
  checkpoint under its released name (mtp.findings: unwritten, renamed, differs), and the Megatron MTP
  parameters Megatron-Bridge has no mapping for. The VL bridge is not built (provider.vl_reason).
And its weights run through layers that, on a CPU rank, are this project's (te_layout.py: the CPU TE-layout
spec, MaskedGatedDeltaNet, CpuRMSNorm, CpuLayerNormColumnParallelLinear), with this project's logits
(megatron_logits) and gradient reduction (trainers/megatron/grads.py): `layers` records which.
- logprobs: log-probs of project_bridge.batch's left-padded rows, against HF's;
- grads: the same loss through both; HF's gradients carried into Megatron's layout by the path its
  weights take (saved as a checkpoint, loaded by Megatron-Bridge), less what that path gives for zeros
  (the GDN out_norm mapping subtracts 1), against Megatron's own gradients; a non-finite gradient on
  either side is named (`nonfinite_grads`), and the worst error is NaN where any is.
Under TP / EP each rank compares its own shards (gradients reduced as the trainer reduces them, grads.py)
and the ranks' findings are merged (`_merged`); the export gives every rank the full tensors.
The provider's CPU settings (with the MTP block's spec) and the VL reason are provider.py's.
`--break` pieces (tests): mb-perturb (a weight changed after loading), mb-drop (the export loses a
tensor), mb-mapping (A_log and dt_bias exchanged in Megatron-Bridge's mapping, both ways), mb-grad
(Megatron's A_log gradients doubled), mb-mtp-drop and mb-mtp-rename (the MTP export loses `mtp.DROPPED`, or
writes `mtp.RENAMED`'s tensor under another name).
"""
from __future__ import annotations

import importlib.metadata
import time
import traceback
from pathlib import Path

from trainers.worst import differs, worst, worst_key

# case -> (zoo model kind, the bridge class Megatron-Bridge must pick)
CASES = {"text-hybrid": ("text", "Qwen35Bridge"), "moe-hybrid": ("moe", "Qwen35MoEBridge")}
BREAKS = ("mb-perturb", "mb-drop", "mb-mapping", "mb-grad", "mb-mtp-drop", "mb-mtp-rename")


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


def _merged(local: dict) -> list[dict]:
    """Every rank's `local` (this rank's alone without a process group)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [local]
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, local)
    return everyone


def compare(case: str, seed: int, broken: str | None, work: Path, on_cpu: bool = True) -> dict:
    """One model through Megatron-Bridge's bridge on this job's ranks (every rank calls it)."""
    import torch
    import torch.distributed as dist
    from megatron.bridge import AutoBridge
    from megatron.core import parallel_state as ps

    from trainers.megatron.bridge import megatron_state
    from trainers.megatron.model import build_hf_variant, megatron_logits
    from trainers.rollout import positions_from_mask

    from . import provider
    from .project_bridge import batch

    started = time.perf_counter()
    kind, expected = CASES[case]
    tp, ep = ps.get_tensor_model_parallel_world_size(), ps.get_expert_model_parallel_world_size()
    hf = build_hf_variant("hybrid", None, seed=seed, kind=kind).eval()
    folder = work / f"{case}-rank{dist.get_rank() if dist.is_initialized() else 0}"  # no rank writes another's
    hf.save_pretrained(folder)
    bridge = AutoBridge.from_hf_pretrained(str(folder), torch_dtype=torch.float32)
    bridge_class = type(bridge._model_bridge)
    out = {"bridge": f"megatron-bridge {importlib.metadata.version('megatron-bridge')} ({bridge_class.__name__})",
           "bridge_class": bridge_class.__name__, "expected_class": expected, "tp": tp, "ep": ep,
           "layers": "cpu-te-layout" if on_cpu else "provider"}
    if broken == "mb-mapping":
        _corrupt_mapping(bridge_class)
    # megatron-core refuses to train MoE under TP without sequence parallelism (as the project's model.py)
    models, out["overrides"] = provider.build(bridge, on_cpu, tp, ep, sequence_parallel=kind == "moe" and tp > 1)
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

    out.update(_against_project(hf, megatron_state(model), tp, ps.get_tensor_model_parallel_rank(), ep,
                                ps.get_expert_model_parallel_rank()))

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
    out.update(_gradients(hf, models, bridge, ids, mask, padding_idx, folder.with_name(folder.name + "-grads"), broken))
    # last: saving the MTP checkpoint sets the model's mtp_num_hidden_layers
    out["mtp"] = mtp_round_trip(hf, seed, broken, folder.with_name(folder.name + "-mtp"), on_cpu, tp, ep,
                                kind == "moe" and tp > 1)
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def mtp_round_trip(hf, seed: int, broken: str | None, folder: Path, on_cpu: bool, tp: int, ep: int,
                   sequence_parallel: bool) -> dict:
    """MTP on, all Megatron-Bridge's: `hf` saved with one MTP layer as released checkpoints carry it
    (trainers/mtp.py), its provider (mtp_num_layers from the HF config) building the model with megatron-core's
    MTP block, `load_hf_weights`, `export_hf_weights`; every tensor against the checkpoint (mtp.findings), with
    the Megatron MTP parameters its mapping registry has no entry for. Its (or megatron-core's) error, with the
    line of its code that raised, is the result, with those parameters (0.6.2's load raises on one: a MoE MTP
    layer's SequentialMLP experts)."""
    import torch
    from megatron.bridge import AutoBridge

    from trainers import mtp as layout
    from trainers.megatron.bridge import megatron_state

    from . import mtp, provider
    from .megatron_bridge import raising_line

    started = time.perf_counter()
    unmapped: list[str] = []
    try:
        layout.save_checkpoint(hf, folder, seed)
        bridge = AutoBridge.from_hf_pretrained(str(folder), torch_dtype=torch.float32)
        models, overrides = provider.build(bridge, on_cpu, tp, ep, sequence_parallel)
        registry = bridge._model_bridge.mapping_registry()
        megatron_mtp = sorted(n for n in megatron_state(models[0]) if n.startswith("mtp."))
        unmapped = [n for n in megatron_mtp if registry.megatron_to_hf_lookup(n) is None]
        bridge.load_hf_weights(models)
        exported = {name: tensor.clone()
                    for name, tensor in bridge.export_hf_weights(models, cpu=True, show_progress=False)}
    except Exception as exc:  # Megatron-Bridge's (or megatron-core's) refusal of the MTP checkpoint is the finding
        traceback.print_exc()
        where = raising_line(exc)
        return {"error": (f"{type(exc).__name__}: {exc}"[:1500] + (f" (raised at {where})" if where else "")),
                "unmapped": unmapped[:20]}
    if broken == "mb-mtp-drop":
        exported.pop(mtp.DROPPED, None)
    elif broken == "mb-mtp-rename" and mtp.RENAMED[0] in exported:
        exported[mtp.RENAMED[1]] = exported.pop(mtp.RENAMED[0])
    return {**mtp.findings(layout.read_checkpoint(folder), exported), "megatron_mtp_tensors": len(megatron_mtp),
            "unmapped": unmapped[:20], "mtp_block_spec": "mtp_block_spec" in overrides,
            "seconds": round(time.perf_counter() - started, 3)}


def _against_project(hf, library: dict, tp: int, tp_rank: int, ep: int, ep_rank: int) -> dict:
    """The project mapping's Megatron tensors against Megatron-Bridge's, in TE's layout names, shard by shard."""
    from trainers.megatron import mapping

    from .te_layout import project_name

    project = mapping.hf_to_megatron({k: v.detach() for k, v in hf.state_dict().items()}, hf.config, tp, tp_rank,
                                     ep, ep_rank)
    largest, mismatched, matched = 0.0, [], set()
    for name, value in project.items():
        te_name, offset = project_name(name, library)
        if te_name is None:
            continue
        matched.add(te_name)
        # the project's GDN out_norm is plain (x * w); Megatron-Bridge stores it zero-centred (x * (1 + w))
        diff = project_difference(value, library[te_name], offset)
        if differs(diff):
            mismatched.append(name)
            largest = worst([largest, diff])
    unmatched = [n for n in project if project_name(n, library)[0] is None] + [n for n in library if n not in matched]
    ranks = _merged({"compared": sorted(matched), "mismatched": mismatched, "worst": largest,
                     "unmatched": unmatched})
    return {"project_compared": len({n for r in ranks for n in r["compared"]}),
            "project_mismatched": sorted({n for r in ranks for n in r["mismatched"]})[:20],
            "project_max_abs_diff": worst(r["worst"] for r in ranks),
            "project_unmatched": sorted({n for r in ranks for n in r["unmatched"]})[:20]}


def project_difference(project, library, offset: float) -> float:
    """max |project - (library + offset)| of one tensor: inf for another shape, NaN where either holds one."""
    if project.shape != library.shape:
        return float("inf")
    return float((project.float() - (library.float() + offset)).abs().max()) if project.numel() else 0.0


def _save_as_checkpoint(hf, values: dict, folder: Path) -> None:
    import torch

    with torch.no_grad():
        for name, parameter in hf.named_parameters():
            parameter.copy_(values[name])
    hf.save_pretrained(folder)


def _gradients(hf, models, bridge, ids, mask, padding_idx, folder: Path, broken) -> dict:
    import torch

    from trainers.megatron.bridge import megatron_state
    from trainers.megatron.grads import Groups, reduce_gradients, zero_padding_row
    from trainers.megatron.model import megatron_logits
    from trainers.rollout import positions_from_mask

    from .project_bridge import next_token_logprobs

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
    # TE's layout keeps the project's names for split weights, so the trainer's reduction rules apply as they are
    reduce_gradients(model, Groups.from_megatron(model.config.sequence_parallel))
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
    local = {}
    for name, grad in got.items():
        want = carried[name] - offsets[name]
        local[name] = (float((grad - want).abs().max()), float(want.abs().max()),
                       bool(torch.isfinite(grad).all() and torch.isfinite(want).all()))
    return gradient_errors(_merged(local))


def gradient_errors(ranks: list[dict]) -> dict:
    """Every rank's {name: (max |diff|, max |g_hf|, both finite)} -> the worst relative error (NaN-aware: a
    NaN anywhere is the worst), its tensor, and the tensors with a non-finite gradient on either side."""
    errors, nonfinite = {}, set()
    for name in dict.fromkeys(n for r in ranks for n in r):  # a split tensor's: max |diff| / max |g_hf| over shards
        diffs, scales, finite = zip(*(r[name] for r in ranks if name in r))
        errors[name] = worst(diffs) / (worst(scales) or 1.0)
        if not all(finite):
            nonfinite.add(name)
    name = worst_key(errors)
    return {"max_rel_grad_error": errors[name], "worst_grad": name, "grads_compared": len(errors),
            "nonfinite_grads": sorted(nonfinite)[:20]}


def preload() -> None:
    """Import Megatron-Bridge (the TE stand-in installed first where needed) in the process that forks the ranks,
    so that its jobs' ranks share the import (about 12 s on a core) instead of each doing it again. Its failure
    is left to the ranks, which import again and record the error with its line as before; an import that
    started a thread only makes the jobs fall back to torchrun's fresh ranks (ranks.fork_safe)."""
    from . import provider, te_import  # noqa: F401  (the ranks' own imports, shared too)

    te_import.install()
    try:
        import megatron.bridge  # noqa: F401
    except Exception:  # noqa: BLE001, S110 - recorded where it counts, by each rank's own import
        pass


def run(cases: list[str], seed: int, broken: str | None, work: Path, on_cpu: bool = True) -> dict:
    """{"import": ..., case: result or {"error"}} on this rank; the TE stand-in installed first where needed."""
    from . import provider, te_import

    te_import.install()
    results: dict = {}
    try:
        import megatron.bridge  # noqa: F401  (the import itself is what fails on a CPU runner without the stand-in)
    except Exception as exc:  # noqa: BLE001 - its own error (and line) is the finding
        from .megatron_bridge import raising_line

        results["import"] = {"error": f"{type(exc).__name__}: {exc}", "where": raising_line(exc), **te_import.record()}
        return results
    results["import"] = {"error": None, **te_import.record()}
    work.mkdir(parents=True, exist_ok=True)
    results["vl"] = provider.vl_reason()
    for case in cases:
        try:
            results[case] = compare(case, seed, broken, work, on_cpu)
        except Exception as exc:  # Megatron-Bridge's (or megatron-core's) own error is the finding
            traceback.print_exc()
            results[case] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    return results
