"""Does the installed megatron-core's Gated DeltaNet take packed (THD) sequences? Measured, not assumed.

`probe_packed_gdn(layer)` calls one built GatedDeltaNet layer with two sequences packed into one row
and `PackedSeqParams` (qkv_format "thd", cu_seqlens), and compares each packed sequence's output
with the same sequence run alone. megatron-core 0.16.1 and 0.17.0 raise NotImplementedError
("GDN does not support packed sequence for now"); a release that accepts THD must also keep the
sequences apart (a recurrent layer that ignores the boundaries leaks state from one into the next).
The result is the evidence behind `use_remove_padding=False`, and what the trainer decides from.
"""
from __future__ import annotations

import torch

LENGTHS = (5, 7)
# fp32: the same chunked recurrence over a sequence alone and inside the packed row.
LEAK_ATOL = 1e-5


def gated_delta_net_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    return [module for module in model.modules() if isinstance(module, GatedDeltaNet)]


def _packed_params(lengths, device):
    from megatron.core.packed_seq_params import PackedSeqParams

    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=bounds, cu_seqlens_kv=bounds,
                           max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths))


def probe_packed_gdn(layer: torch.nn.Module, ignore_boundaries: bool = False) -> dict:
    """{"accepted": bool, "error": str | None, "max_leak": float | None, "keeps_sequences_apart": bool | None}.

    `ignore_boundaries` (tests only) packs the row but leaves out PackedSeqParams: the forward that
    leaks state across samples, which must be reported as such."""
    hidden = layer.config.hidden_size
    device = next(layer.parameters()).device
    generator = torch.Generator().manual_seed(3)
    alone = [torch.randn(length, 1, hidden, generator=generator).to(device) for length in LENGTHS]
    packed = torch.cat(alone, dim=0)  # (sum of lengths, 1, H): THD as megatron carries it
    params = None if ignore_boundaries else _packed_params(LENGTHS, device)
    with torch.no_grad():
        try:
            out, _ = layer(packed, attention_mask=None, packed_seq_params=params)
        except (NotImplementedError, AssertionError, ValueError, RuntimeError) as exc:
            return {"accepted": False, "error": f"{type(exc).__name__}: {exc}", "max_leak": None,
                    "keeps_sequences_apart": None}
        singles = torch.cat([layer(x, attention_mask=None)[0] for x in alone], dim=0)
    leak = float((out - singles).abs().max())
    return {"accepted": True, "error": None, "max_leak": leak, "keeps_sequences_apart": leak <= LEAK_ATOL}


def packed_refusal(model: torch.nn.Module, megatron_core_version: str) -> str | None:
    """The one-line reason packed batches cannot run with this model here, or None where they can."""
    layers = gated_delta_net_layers(model)
    if not layers:
        return None
    probe = probe_packed_gdn(layers[0])
    if not probe["accepted"]:
        return (f"packed (THD) batches refused: megatron-core {megatron_core_version}'s GatedDeltaNet raised "
                f"{probe['error']} on packed input; set use_remove_padding=false (padded BSHD batches)")
    if not probe["keeps_sequences_apart"]:
        return (f"packed (THD) batches refused: megatron-core {megatron_core_version}'s GatedDeltaNet leaks state "
                f"across packed sequences (max error {probe['max_leak']:.3g}); set use_remove_padding=false")
    return None
