"""Does the installed megatron-core's Gated DeltaNet take packed (THD) sequences? Measured, not assumed.

`probe_packed_gdn(layer)` calls one built GatedDeltaNet layer with two sequences packed into one row
and `PackedSeqParams` (qkv_format "thd", cu_seqlens), and compares each packed sequence's output with
the same sequence run alone and with the two run as a right-padded (BSHD) batch, the layout the
harness trains with. megatron-core 0.16.1 and 0.17.0 raise NotImplementedError ("GDN does not support
packed sequence for now"); a release that accepts THD must also keep the sequences apart (a recurrent
layer that ignores the boundaries leaks state from one into the next).

The harness builds the layer with `deterministic_mode` where flash-linear-attention (FLA) is absent (the
pure-torch gated delta rule), and megatron-core 0.19's packed path refuses that mode ("Packed sequence
does not support deterministic mode"): a refusal caused by the harness's setting, not megatron-core's
limit. So where the configured mode refuses, the probe asks again outside deterministic mode, as
megatron-core runs with FLA, with FLA's two kernels emulated on CPU (fla_standin.py) where FLA is absent;
the result keeps both answers apart (`deterministic_mode_error` and `accepted`).

With the kernels emulated, the packed output, the sequences alone and the padded batch all run
megatron-core's own `torch_chunk_gated_delta_rule`: agreeing with each other shows only that megatron-core
hands the kernels the right boundaries, not that the recurrence is right. So the probe also takes a
`reference`, an implementation that is not the one under test (bridge-parity passes transformers' Qwen3.5
GatedDeltaNet on the same weights, its torch path, each sequence run alone), and records how far the packed
output is from it (`max_reference_error`, `matches_reference`).
"""
from __future__ import annotations

import torch

from .fla_standin import outside_deterministic_mode

LENGTHS = (5, 7)
# fp32: the same chunked recurrence over a sequence alone and inside the packed row.
LEAK_ATOL = 1e-5
# Packed (FLA path, emulated) against padded (the configured path): the same recurrence in another
# association order; measured 4e-7 on megatron-core 0.19.2.
PADDED_ATOL = 1e-4
# Packed (megatron-core) against the reference (transformers' layer on the same weights), relative to the
# reference's largest output: two implementations of the same fp32 recurrence and convolution, measured 1.7e-7
# apart (megatron-core 0.16.1's layer alone against transformers 5.23.0's, outputs of magnitude 4e-3) and 1.1e-7
# (megatron-core 0.19.2's packed path, FLA's kernels emulated, against transformers 5.12.1's).
REFERENCE_RTOL = 1e-4


def gated_delta_net_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    return [module for module in model.modules() if isinstance(module, GatedDeltaNet)]


def _packed_params(lengths, device):
    from megatron.core.packed_seq_params import PackedSeqParams

    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=bounds, cu_seqlens_kv=bounds,
                           max_seqlen_q=max(lengths), max_seqlen_kv=max(lengths))


def _call_packed(layer, packed, params):
    try:
        out, _ = layer(packed, attention_mask=None, packed_seq_params=params)
        return out, None
    except (NotImplementedError, AssertionError, ValueError, RuntimeError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _padded(layer, alone: list[torch.Tensor]) -> torch.Tensor:
    """The sequences as one right-padded (S, B, H) batch, outputs on real tokens in packed order."""
    longest = max(x.shape[0] for x in alone)
    batch = torch.zeros(longest, len(alone), alone[0].shape[-1], dtype=alone[0].dtype, device=alone[0].device)
    for row, x in enumerate(alone):
        batch[: x.shape[0], row] = x[:, 0]
    out = layer(batch, attention_mask=None)[0]
    return torch.cat([out[: x.shape[0], row: row + 1] for row, x in enumerate(alone)], dim=0)


def probe_packed_gdn(layer: torch.nn.Module, ignore_boundaries: bool = False, reference=None,
                     reference_name: str = "") -> dict:
    """{"accepted", "error", "deterministic_mode", "deterministic_mode_error", "emulated_kernels", "max_leak",
    "max_padded_error", "keeps_sequences_apart", "matches_padded", "reference", "max_reference_error",
    "reference_scale", "matches_reference"}.

    accepted/error: megatron-core's own answer (outside deterministic mode where that mode is what refused);
    deterministic_mode_error: the refusal in the mode the harness configured, when only that mode refuses.
    `reference(x)`: another implementation's output for one sequence's (1, T, H) hidden states, batch first
    (`reference_name` says whose); None leaves the reference fields None.
    `ignore_boundaries` (tests only) packs the row but leaves out PackedSeqParams: the forward that
    leaks state across samples, which must be reported as such."""
    hidden = layer.config.hidden_size
    device = next(layer.parameters()).device
    generator = torch.Generator().manual_seed(3)
    alone = [torch.randn(length, 1, hidden, generator=generator).to(device) for length in LENGTHS]
    packed = torch.cat(alone, dim=0)  # (sum of lengths, 1, H): THD as megatron carries it
    params = None if ignore_boundaries else _packed_params(LENGTHS, device)
    result = {"accepted": False, "error": None, "deterministic_mode": bool(layer.config.deterministic_mode),
              "deterministic_mode_error": None, "emulated_kernels": [], "max_leak": None, "max_padded_error": None,
              "keeps_sequences_apart": None, "matches_padded": None, "reference": reference_name or None,
              "max_reference_error": None, "reference_scale": None, "matches_reference": None}
    with torch.no_grad():
        out, error = _call_packed(layer, packed, params)
        if out is not None:
            singles = torch.cat([layer(x, attention_mask=None)[0] for x in alone], dim=0)
            padded = _padded(layer, alone)
        elif result["deterministic_mode"]:  # ask megatron-core itself, without the harness's setting
            singles = torch.cat([layer(x, attention_mask=None)[0] for x in alone], dim=0)
            padded = _padded(layer, alone)  # the configured (deterministic) path: what the harness trains
            with outside_deterministic_mode(layer) as emulated:
                out, second = _call_packed(layer, packed, params)
            result["emulated_kernels"] = emulated
            if out is not None or second != error:
                result["deterministic_mode_error"] = error
            error = second
    if out is None:
        return {**result, "error": error}
    leak, padded_error = float((out - singles).abs().max()), float((out - padded).abs().max())
    result.update(accepted=True, max_leak=leak, max_padded_error=padded_error, keeps_sequences_apart=leak <= LEAK_ATOL,
                  matches_padded=padded_error <= PADDED_ATOL)
    if reference is not None:
        with torch.no_grad():
            theirs = torch.cat([reference(x.transpose(0, 1)).transpose(0, 1) for x in alone], dim=0)
        error, scale = float((out - theirs.to(out.dtype)).abs().max()), float(theirs.abs().max())
        result.update(max_reference_error=error, reference_scale=scale,
                      matches_reference=error <= REFERENCE_RTOL * (scale or 1.0))
    return result


def packed_refusal(model: torch.nn.Module, megatron_core_version: str) -> str | None:
    """The one-line reason packed batches cannot run with this model here, or None where they can."""
    layers = gated_delta_net_layers(model)
    if not layers:
        return None
    probe = probe_packed_gdn(layers[0])
    if probe["deterministic_mode_error"]:  # megatron-core takes THD; the mode chosen here does not
        return (f"packed (THD) batches refused: with deterministic_mode (set because flash-linear-attention is "
                f"not installed), megatron-core {megatron_core_version}'s GatedDeltaNet raised "
                f"{probe['deterministic_mode_error']}; install flash-linear-attention (a GPU runner) or set "
                f"use_remove_padding=false")
    if not probe["accepted"]:
        return (f"packed (THD) batches refused: megatron-core {megatron_core_version}'s GatedDeltaNet raised "
                f"{probe['error']} on packed input; set use_remove_padding=false (padded BSHD batches)")
    if not probe["keeps_sequences_apart"]:
        return (f"packed (THD) batches refused: megatron-core {megatron_core_version}'s GatedDeltaNet leaks state "
                f"across packed sequences (max error {probe['max_leak']:.3g}); set use_remove_padding=false")
    return None
