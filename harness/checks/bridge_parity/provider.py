"""Megatron-Bridge's own model provider on this rank: the settings a CPU runner needs, the model it builds, and
why its VL provider is not built here (read from the installed code).

Each CPU setting comes with the code that needs it, and every result records them (`overrides`; with MTP layers
on CPU also `mtp_block_spec`, the provider's MTP block in TE's layout from te_layout.py); the
comparison with HF needs `COMPARISON` on any device (HF's loss has no MoE auxiliary loss; full-vocabulary
fp32 logits).
"""
from __future__ import annotations

import contextlib

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


def _shown(value) -> str:
    return getattr(value, "__name__", None) or repr(value)[:80]  # a function by its name, not its address


def _apply(provider, on_cpu: bool) -> dict:
    import torch

    settings = {**({k: v for k, (v, _) in cpu_overrides().items()} if on_cpu else {}), **COMPARISON,
                "autocast_dtype": torch.float32}
    recorded = {}
    for key, value in settings.items():
        recorded[key] = {"from": _shown(getattr(provider, key, None)), "to": _shown(value)}
        setattr(provider, key, value)
    if on_cpu:
        for key, (_, why) in cpu_overrides().items():
            recorded[key]["why"] = why
    return recorded


def source_line(function, pattern: str) -> str:
    """'megatron/...py line N: `source`' for the first line of `function` (installed code) matching `pattern`."""
    import inspect
    import re

    lines, start = inspect.getsourcelines(function)
    path = inspect.getsourcefile(function).replace("\\", "/")
    path = "megatron/" + path.split("/megatron/", 1)[1] if "/megatron/" in path else path
    found = next((i for i, line in enumerate(lines) if re.search(pattern, line)), None)
    return f"{path} line {start + found}: `{lines[found].strip()}`" if found is not None else f"{path} ({pattern})"


@contextlib.contextmanager
def _mtp_spec(on_cpu: bool):
    """On a CPU rank, the provider's MTP block from te_layout.mtp_block_spec while it builds; yields what it
    records (empty on another device). GPTModelProvider.provide calls the module's `mtp_block_spec`, which asks
    megatron-core for Transformer Engine's spec, and megatron-core sets TESpecProvider to None where Transformer
    Engine is absent: no provider field chooses it, so the module's function is replaced for the build only."""
    if not on_cpu:
        yield {}
        return
    from megatron.bridge.models import gpt_provider

    from . import te_layout

    own = gpt_provider.mtp_block_spec
    recorded = {"from": f"{own.__module__}.{own.__name__}", "to": "te_layout.mtp_block_spec",
                "why": f"{source_line(own, 'use_transformer_engine=True')} builds Transformer Engine's MTP layer "
                       "(megatron-core's TESpecProvider, None without Transformer Engine: "
                       "megatron/core/models/gpt/gpt_layer_specs.py); te_layout.mtp_block_spec builds it in TE's "
                       "parameter layout from megatron-core's local modules"}
    gpt_provider.mtp_block_spec = te_layout.mtp_block_spec
    try:
        yield recorded
    finally:
        gpt_provider.mtp_block_spec = own


def build(bridge, on_cpu: bool, tp: int = 1, ep: int = 1, sequence_parallel: bool = False):
    """The bridge's provider, set for this runner and job, and the model it provides ([model], recorded settings);
    with its MTP block where the HF config declares MTP layers (on CPU in TE's layout: `_mtp_spec`)."""
    provider = bridge.to_megatron_provider(load_weights=False)
    overrides = _apply(provider, on_cpu)
    provider.tensor_model_parallel_size, provider.expert_model_parallel_size = tp, ep
    provider.sequence_parallel = sequence_parallel
    provider.finalize()
    with _mtp_spec(on_cpu and bool(provider.mtp_num_layers)) as mtp_spec:
        model = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True,
                                                   mixed_precision_wrapper=None, fp16=False, bf16=False)
    if mtp_spec:
        overrides["mtp_block_spec"] = mtp_spec
    return model, overrides


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
                      f"{len(where)} such lines in {builder.__name__}), which have no CPU build; building it needs a "
                      "GPU runner with Transformer Engine", "where": where}
