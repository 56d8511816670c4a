"""All FSDP2 sharding decisions, in one function and a fixed order (as torchtitan does):
gradient checkpointing, then `fully_shard` on each embedding, each transformer block,
and finally the root, with one mixed-precision and one offload policy for all of them."""
from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

from ..device import DevicePlan


def block_classes(model: nn.Module) -> set[str]:
    """Names of the classes that form one FSDP unit each (Hugging Face's `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} declares no _no_split_modules; cannot choose FSDP units")
    return names


def embedding_units(model: nn.Module) -> list[nn.Module]:
    """Every nn.Embedding gets its own unit when word embeddings are untied (verl's policy).

    For the vision-language model this makes `visual.pos_embed` its own unit: the
    precondition of the transformers 5.2-5.8 offload bug the harness checks for.
    """
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    if tied:
        return []
    return [m for m in model.modules() if isinstance(m, nn.Embedding)]


def parallelize(model: nn.Module, plan: DevicePlan, *, mesh=None, offload: bool = False,
                gradient_checkpointing: bool = False) -> nn.Module:
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    kwargs = {
        "mesh": mesh,
        # Pinned host memory needs an accelerator: CPUOffloadPolicy() fails at fully_shard without one.
        "offload_policy": CPUOffloadPolicy(pin_memory=plan.pin_memory) if offload else OffloadPolicy(),
    }
    if plan.mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for embedding in embedding_units(model):
        fully_shard(embedding, **kwargs)
    blocks = block_classes(model)
    for module in model.modules():
        if type(module).__name__ in blocks:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model
