"""The rank side of the project's own bridge in bridge-parity: HF and megatron-core on the same Qwen3.5 weights.

Per case (model kind + variant), on every rank of a job (ranks.py runs it):
- forward: log-probs of one left-padded BSHD batch (`batch`) from HF and from megatron-core, on real tokens;
- round trip: HF -> Megatron (sharded over TP and EP, trainers/megatron/bridge.py) -> HF, compared bitwise;
- gradients: the same loss backpropagated through both; the Megatron gradients reduced as the
  trainer reduces them (grads.py, each data-parallel rank taking its share of the rows),
  gathered into HF layout by the same mapping, and compared with HF's, parameter by parameter;
- packed sequences (cases with Gated DeltaNet): megatron-core's GDN called with THD input (packed.py), and
  held to transformers' own GatedDeltaNet on the same weights, each sequence alone (`hf_reference`);
- MTP on (hybrid cases): the same HF model saved with its MTP layer, round-tripped through a GPTModel with
  megatron-core's MTP block (mtp.py), recorded under `mtp`; everything above is MTP off.
`break_mapping` makes the mapping wrong on purpose (PROJECT_BREAKS), so tests can watch the verdicts fail.
`batch` and `next_token_logprobs` are shared with library.py, Megatron-Bridge's own bridge on the same batch.
"""
from __future__ import annotations

import time
from pathlib import Path

from .mtp import MTP_BREAKS, break_export, project_models

PROJECT_BREAKS = ("gdn-head-order", "expert-swap", "qkv", "shim-l2norm", "grad-skip", "padding-row", "packed",
                  *MTP_BREAKS)
GDN_PARAMETERS = ("A_log", "dt_bias", "conv1d", "out_norm")


def batch(vocab: int, seed: int, pad_id: int = 0):
    """Left-padded rows of different lengths, as the rollout engine produces them; one row also
    holds the pad token at a real position, as a sampled response can."""
    import torch

    generator = torch.Generator().manual_seed(seed + 17)
    lengths = [24, 17, 9, 24]
    ids = torch.full((len(lengths), max(lengths)), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, -length:] = torch.randint(3, vocab, (length,), generator=generator)
        mask[row, -length:] = 1
    ids[0, -4] = pad_id
    return ids, mask


def next_token_logprobs(logits, ids, mask):
    """(log-probs of each next real token, where it is real) from (B, S, V) logits."""
    import torch

    logprobs = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logprobs, (mask[:, 1:] * mask[:, :-1]).bool()


def break_mapping(kind: str) -> None:
    import torch

    from trainers.megatron import mapping

    if kind in MTP_BREAKS:
        break_export(kind)
    elif kind == "gdn-head-order":  # value heads in reverse order: a wrong head ordering of the fused in_proj
        right = mapping.fuse_gdn_in_proj

        def reversed_heads(qkv, z, b, a, c, tp, rank):
            key, value = c.linear_key_head_dim * c.linear_num_key_heads, c.linear_value_head_dim
            q, k, v = qkv.split([key, key, qkv.shape[0] - 2 * key], dim=0)
            v = v.reshape(c.linear_num_value_heads, value, -1).flip(0).reshape(v.shape)
            return right(torch.cat([q, k, v]), z, b, a, c, tp, rank)

        mapping.fuse_gdn_in_proj = reversed_heads
    elif kind == "expert-swap":
        right = mapping.hf_to_megatron

        def swapped(hf_state, c, *args, **kwargs):
            state = dict(hf_state)
            for name in [n for n in state if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
                state[name] = state[name][[1, 0, *range(2, state[name].shape[0])]]
            return right(state, c, *args, **kwargs)

        mapping.hf_to_megatron = swapped
    elif kind == "qkv":
        right = mapping.fuse_qkv

        def query_gate_swapped(q_proj, k_proj, v_proj, c):
            q = q_proj.reshape(c.num_attention_heads, 2, c.head_dim, -1).flip(1).reshape(q_proj.shape)
            return right(q, k_proj, v_proj, c)

        mapping.fuse_qkv = query_gate_swapped


def compare(kind: str, variant: str, sizes, seed: int, broken: str | None, work: Path | None = None) -> dict:
    """One case on this rank; raises what megatron-core raises (the caller records it). With `work` (a folder
    for the MTP checkpoint), a hybrid case also runs MTP on (`out["mtp"]`, its own error kept there). The
    bridges are not asked here: the check's own process asks them (bridge_parity.ask_bridges), so no rank of the
    project's jobs imports a bridge library."""
    import torch
    from megatron.core import parallel_state as ps

    from trainers.megatron import bridge
    from trainers.megatron.grads import Groups
    from trainers.megatron.model import build_gpt_model, build_hf_variant, megatron_logits
    from trainers.megatron.packed import gated_delta_net_layers, probe_packed_gdn
    from trainers.rollout import positions_from_mask

    out: dict = {"model": kind, "variant": variant, "tp": sizes.tp, "ep": sizes.ep}
    started = time.perf_counter()
    hf = build_hf_variant(variant, None, seed=seed, kind=kind).eval()
    model = build_gpt_model(hf.config, sizes).eval()
    reference = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    bridge.load_hf_into_megatron(model, reference, hf.config, sizes.tp, ps.get_tensor_model_parallel_rank(),
                                 sizes.ep, ps.get_expert_model_parallel_rank())
    back = bridge.gather_hf_state(model, hf.config)
    mismatched = sorted(k for k in reference if k not in back or not torch.equal(back[k], reference[k]))
    out["roundtrip_exact"] = sorted(back) == sorted(reference) and not mismatched
    out["roundtrip_mismatched"] = mismatched
    padding_idx = hf.get_input_embeddings().padding_idx
    ids, mask = batch(hf.config.vocab_size, seed, padding_idx or 0)
    real = mask.bool()
    with torch.no_grad():
        hf_lp = torch.log_softmax(hf(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                                     use_cache=False).logits.float(), -1)
        mc_lp = torch.log_softmax(megatron_logits(model, ids, mask).float(), -1)
    out["max_abs_logprob_error"] = float((hf_lp - mc_lp)[real].abs().max())
    out["finite"] = bool(torch.isfinite(mc_lp[real]).all())
    groups = Groups.from_megatron(model.config.sequence_parallel)
    out.update(_gradients(hf, model, ids, mask, broken, groups, padding_idx, bridge))
    layers = gated_delta_net_layers(model)
    out["gated_delta_net_layers"] = len(layers)
    if layers:
        reference, name = hf_reference(hf)
        out["packed"] = probe_packed_gdn(layers[0], ignore_boundaries=broken == "packed", reference=reference,
                                         reference_name=name)
    if work is not None and variant == "hybrid":  # last: saving the checkpoint sets mtp_num_hidden_layers
        out["mtp"] = project_models(kind, hf, sizes, seed, work / "mtp")
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def hf_reference(hf):
    """(transformers' first GatedDeltaNet layer of `hf` as a function of one sequence's hidden states, its name):
    the same weights megatron-core's first GDN layer was loaded with (the layers are in the same order), run
    by transformers' own code (its torch path where flash-linear-attention is absent). (None, "") without one."""
    import transformers

    layer = next((m for m in hf.modules() if type(m).__name__.endswith("GatedDeltaNet")), None)
    if layer is None:
        return None, ""
    return (lambda x: layer(hidden_states=x)), (f"transformers {transformers.__version__}'s "
                                                 f"{type(layer).__name__} on the same weights, each sequence alone")


def _gradients(hf, model, ids, mask, broken, groups, padding_idx, bridge) -> dict:
    """Relative gradient error per HF parameter: max |g_megatron - g_hf| / max |g_hf|."""
    import torch
    from megatron.core import parallel_state as ps

    from trainers.megatron.grads import reduce_gradients, zero_padding_row
    from trainers.megatron.model import megatron_logits
    from trainers.rollout import positions_from_mask

    hf.zero_grad(set_to_none=True)
    logprobs, valid = next_token_logprobs(hf(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                                             use_cache=False).logits, ids, mask)
    count = valid.sum()
    (-(logprobs * valid).sum() / count).backward()
    # this data-parallel rank's rows; its loss is scaled to the global count * dp as the trainer does
    share = ids.shape[0] // groups.dp_size
    rows = slice(ps.get_data_parallel_rank() * share, (ps.get_data_parallel_rank() + 1) * share)
    model.train()
    model.zero_grad(set_to_none=True)
    local_lp, local_valid = next_token_logprobs(megatron_logits(model, ids[rows], mask[rows]), ids[rows], mask[rows])
    (-(local_lp * local_valid).sum() * groups.dp_size / count).backward()
    model.eval()
    if broken != "padding-row":
        zero_padding_row(model, padding_idx)
    reduce_gradients(model, groups, skip=GDN_PARAMETERS if broken == "grad-skip" else ())
    grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)) for name, p in model.named_parameters()}
    gathered = bridge.gather_hf_state(model, hf.config, local=grads)
    errors, nonfinite = {}, []
    for name, parameter in hf.named_parameters():
        want = parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
        scale = float(want.abs().max()) or 1.0
        errors[name] = float((gathered[name] - want).abs().max()) / scale
        if not (torch.isfinite(gathered[name]).all() and torch.isfinite(want).all()):
            nonfinite.append(name)
    return gradient_summary(errors, nonfinite)


def gradient_summary(errors: dict[str, float], nonfinite: list[str]) -> dict:
    """The worst relative gradient error (NaN-aware: a NaN anywhere is the worst), overall and over the GDN
    parameters, and the parameters whose gradient was not finite on either side."""
    from trainers.worst import worst, worst_key

    name = worst_key(errors)
    gdn = [v for k, v in errors.items() if k.rsplit(".", 1)[-1] in ("A_log", "dt_bias")
           or ".conv1d." in k or ".linear_attn.norm." in k]
    return {"max_rel_grad_error": errors[name], "worst_grad": name,
            "max_rel_grad_error_gdn": worst(gdn) if gdn else None, "grads_compared": len(errors),
            "nonfinite_grads": nonfinite[:20]}
