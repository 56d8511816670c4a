"""bridge-parity with MTP on: a tiny Qwen3.5 checkpoint carrying its multi-token-prediction tensors
(trainers/mtp.py: `mtp.*`, as released checkpoints lay them out) converted HF -> Megatron -> HF by a bridge,
every tensor compared with the checkpoint under its released name.

The rank side (`project_models`) reuses the job's ranks and the HF model the MTP-off comparison built (the
text case also the zoo's VL model): it saves each with one MTP layer, builds the language model in megatron-core
with its MTP block, loads the checkpoint through the project mapping, exports it back, and `findings` names
- unwritten: a checkpoint tensor the export does not hold (Megatron-Bridge #2789's failure);
- renamed: an exported tensor under a name the checkpoint does not have (a layer renamed, #3769; MTP tensors
  moved under the language model's prefix, #5252);
- differs: a tensor under its own name with another shape or other values (misplaced: swapped experts, a
  wrong split), bitwise, NaN counting as a difference.
A mapping or megatron-core that refuses the checkpoint (an MTP tensor it has no place for) raises on the
ranks; its own error is the verdict's message.
Verdicts: `<model>-mtp-<job>` (text-hybrid, vl-hybrid, moe-hybrid); the MTP-off verdicts keep their names
without `-mtp`. Megatron-Bridge's own conversion of these checkpoints runs on its jobs' ranks (library.py
`mtp_round_trip`, judged by `findings` and `verdict` as `megatron-bridge/<model>-<job>/mtp-roundtrip`); mbridge's
is not run.
`--break` pieces (tests): mtp-drop (the project's export loses `DROPPED`), mtp-rename (it writes `RENAMED`'s
tensor under another name).
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

from harness.results.records import Status, Verdict

PROJECT_MAPPING = "project-mapping"  # trainers.megatron.bridge's name for it (that module imports torch)
MTP_BREAKS = ("mtp-drop", "mtp-rename")
DROPPED = "mtp.pre_fc_norm_embedding.weight"
RENAMED = ("mtp.norm.weight", "mtp.final_layernorm.weight")  # Megatron's name leaking into the export
SHOWN = 8  # names listed per kind in a message
# hybrid case -> the models its MTP round trips save: the case's own, and for the text case the zoo's VL model
MODELS = {"text-hybrid": ("text-hybrid", "vl-hybrid"), "moe-hybrid": ("moe-hybrid",)}


def break_export(kind: str) -> None:
    """Make the project mapping's export wrong on an MTP tensor (`MTP_BREAKS`)."""
    from trainers.megatron import mapping

    right = mapping.megatron_to_hf

    def broken(shards, c, *args, **kwargs):
        out = right(shards, c, *args, **kwargs)
        if kind == "mtp-drop":
            out.pop(DROPPED, None)
        elif kind == "mtp-rename" and RENAMED[0] in out:
            out[RENAMED[1]] = out.pop(RENAMED[0])
        return out

    mapping.megatron_to_hf = broken


def findings(checkpoint: dict, exported: dict) -> dict:
    """The round trip's named differences from the checkpoint (every tensor, MTP or not)."""
    import torch

    unwritten = sorted(k for k in checkpoint if k not in exported)
    renamed = sorted(k for k in exported if k not in checkpoint)
    differs = sorted(k for k in checkpoint if k in exported and not (
        exported[k].shape == checkpoint[k].shape and torch.equal(exported[k], checkpoint[k])))
    return {"compared": len(checkpoint), "mtp_tensors": sum(k.startswith("mtp.") for k in checkpoint),
            "unwritten": unwritten, "renamed": renamed, "differs": differs}


def project_round_trip(hf, sizes, seed: int, folder: Path) -> dict:
    """The project mapping on this rank: `hf` saved with its MTP layer, its language model loaded into a GPTModel
    with megatron-core's MTP block (sharded over the job's TP and EP), gathered back under the checkpoint's names;
    raises what the mapping or megatron-core raises. A VL checkpoint's vision tower is outside the mapping (the
    Megatron model is the language model): counted, not compared."""
    from megatron.core import parallel_state as ps

    from trainers import mtp
    from trainers.megatron import bridge, mapping
    from trainers.megatron.model import build_gpt_model

    started = time.perf_counter()
    _saved_by_rank0(lambda: mtp.save_checkpoint(hf, folder, seed))
    checkpoint = mtp.read_checkpoint(folder)
    text, outside = mtp.as_text(checkpoint)
    config = mtp.text_config(hf.config)
    model = build_gpt_model(config, sizes, mtp_layers=mapping.mtp_layers_in(text))  # as many as the checkpoint has
    bridge.load_hf_into_megatron(model, text, config, sizes.tp, ps.get_tensor_model_parallel_rank(),
                                 sizes.ep, ps.get_expert_model_parallel_rank())
    exported = mtp.as_released(bridge.gather_hf_state(model, config, like=text), mtp.is_vl(checkpoint))
    megatron_mtp = sorted(n for n in bridge.megatron_state(model) if n.startswith("mtp."))
    return {**findings({k: v for k, v in checkpoint.items() if k not in outside}, exported),
            "outside_mapping": len(outside), "megatron_mtp_tensors": len(megatron_mtp),
            "megatron_mtp_layer": mapping.mtp_layer_name(megatron_mtp),
            "seconds": round(time.perf_counter() - started, 3)}


def _saved_by_rank0(save) -> None:
    """Rank 0 saves (transformers writes checkpoint files on rank 0 alone), every rank waits for it and learns
    whether it worked, so that no rank goes on to a collective the others do not reach."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        save()
        return
    error = None
    if dist.get_rank() == 0:
        try:
            save()
        except Exception as exc:  # re-raised below, after the other ranks know
            error = exc
    ok = torch.tensor([0 if error else 1])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if error is not None:
        raise error
    if not ok.item():
        raise RuntimeError("rank 0 could not save the MTP checkpoint (its error is in its verdict and log)")


def project_models(kind: str, hf, sizes, seed: int, folder: Path) -> dict:
    """MTP on for one hybrid case on this rank: {model name: round trip, or {"error": ...}}; the text case also
    runs the zoo's VL model (MODELS)."""
    from trainers.models import build_model

    out = {}
    for name in MODELS[f"{kind}-hybrid"]:
        try:
            model = hf if name == f"{kind}-hybrid" else build_model(name.split("-")[0], seed=seed)
            out[name] = project_round_trip(model, sizes, seed, folder / name)  # one folder for all ranks
        except Exception as exc:  # the mapping's or megatron-core's refusal of the MTP checkpoint is the finding
            traceback.print_exc()
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    return out


def _listed(kind: str, names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"{kind} {names[:SHOWN]}{more}"


def problems(data: dict) -> list[str]:
    """What the round trip got wrong, each kind with the tensors it names; [] for none."""
    found = [_listed(kind, data[kind]) for kind in ("unwritten", "renamed", "differs") if data.get(kind)]
    if not data.get("mtp_tensors"):
        found.append("the checkpoint held no MTP tensor, so MTP was not measured")
    return found


def verdict(name: str, data: dict | None, bridge: str, tp=None, ep=None) -> Verdict:
    """One bridge's MTP-on round trip on one job."""
    metrics = {"bridge": bridge, "tp": tp, "ep": ep, "mtp": True}
    if data is None:
        return Verdict(name, Status.FAIL, f"bridge {bridge}: no MTP round trip was recorded", metrics=metrics)
    if "error" in data:  # the bridge (or megatron-core) refused the MTP checkpoint: its own words
        return Verdict(name, Status.FAIL, f"bridge {bridge}, MTP on: {data['error']}", metrics=metrics)
    metrics.update({key: data.get(key) for key in ("compared", "mtp_tensors", "outside_mapping",
                                                    "megatron_mtp_tensors", "megatron_mtp_layer", "seconds")})
    metrics.update({key: data.get(key, [])[:20] for key in ("unwritten", "renamed", "differs")})
    wrong = problems(data)
    if wrong:
        return Verdict(name, Status.FAIL, f"bridge {bridge}, MTP on: round trip not exact: " + "; ".join(wrong),
                       metrics=metrics)
    outside = (f"; the vision tower's {data['outside_mapping']} tensors are outside it (its Megatron model is the "
               "language model), not compared" if data.get("outside_mapping") else "")
    return Verdict(name, Status.PASS, f"bridge {bridge}, MTP on: HF -> Megatron -> HF bitwise equal under the "
                   f"released names ({data['compared']} tensors, {data['mtp_tensors']} of them MTP){outside}",
                   metrics=metrics)
