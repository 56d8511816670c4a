"""Gradient reduction for the Megatron trainer: which group each parameter's gradient is summed over.

megatron-core's own DistributedDataParallel does this with grad buffers; verl needed a fix so the
Gated DeltaNet parameters (A_log, dt_bias, conv1d, the gated norm) were in those buffers and got
reduced at all (seed 001). This trainer keeps the rule explicit, per parameter name:
- replicated weights applied only to a rank's own heads (q/k layernorm of attention, the GDN
  gated norm): each tensor-parallel rank holds part of the gradient, summed over the TP group;
  with sequence parallelism (MoE under TP) every replicated weight sees only the rank's slice
  of the sequence (norms, router, shared-expert gate), so all of them are summed over TP;
- routed experts live on one expert-parallel rank: summed over the expert data-parallel group;
  everything else over the data-parallel group; both then divided by the data-parallel size, as
  megatron's DDP scales both (each rank's loss is normalised by the global token count * dp);
- the gradient norm counts each distinct shard once: TP-split tensors over the TP group, experts
  over the expert tensor-and-model-parallel group, replicated tensors once.
Also HF's `nn.Embedding(padding_idx=pad_token_id)` never trains the pad token's row (its gradient
is always zero, and the row starts at zero); megatron's VocabParallelEmbedding has no padding_idx,
and a sampled pad token at a real position then gets a huge gradient there (RMSNorm of a zero
vector: a Jacobian of 1/sqrt(eps)). `zero_padding_row` applies HF's rule to the Megatron shard.
Tests check the result against the Hugging Face model's gradients, parameter by parameter.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .mapping import is_expert, is_tensor_parallel

# Replicated tensors that each tensor-parallel rank applies to its own heads only.
_HEADWISE_REPLICATED = ("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight",
                        "self_attention.out_norm.weight")


def partial_over_tensor_parallel(name: str) -> bool:
    return name.endswith(_HEADWISE_REPLICATED)


@dataclass
class Groups:
    tp: object = None
    tp_size: int = 1
    dp: object = None
    dp_size: int = 1
    expert_dp: object = None
    expert_dp_size: int = 1
    expert_mp: object = None  # expert tensor x expert model parallel
    sequence_parallel: bool = False

    @classmethod
    def from_megatron(cls, sequence_parallel: bool = False) -> Groups:
        from megatron.core import parallel_state as ps

        return cls(tp=ps.get_tensor_model_parallel_group(), tp_size=ps.get_tensor_model_parallel_world_size(),
                   dp=ps.get_data_parallel_group(), dp_size=ps.get_data_parallel_world_size(),
                   expert_dp=ps.get_expert_data_parallel_group(),
                   expert_dp_size=ps.get_expert_data_parallel_world_size(),
                   expert_mp=ps.get_expert_tensor_and_model_parallel_group(), sequence_parallel=sequence_parallel)


def zero_padding_row(model: torch.nn.Module, padding_idx: int | None) -> None:
    """HF's padding_idx on megatron's vocabulary-parallel embedding: that row's gradient is zero."""
    if padding_idx is None:
        return
    embedding = model.embedding.word_embeddings
    start, end = embedding.vocab_start_index, embedding.vocab_end_index
    if embedding.weight.grad is not None and start <= padding_idx < end:
        embedding.weight.grad[padding_idx - start].zero_()


def reduce_gradients(model: torch.nn.Module, groups: Groups, skip: tuple[str, ...] = ()) -> None:
    """Make every rank's `.grad` the full-batch gradient of its own shard. `skip` (tests only)
    leaves the named parameters unreduced, the bug of seed 001."""
    for name, parameter in model.named_parameters():
        if parameter.grad is None or any(part in name for part in skip):
            continue
        if groups.tp_size > 1 and (partial_over_tensor_parallel(name) or (
                groups.sequence_parallel and not is_tensor_parallel(name) and not is_expert(name))):
            dist.all_reduce(parameter.grad, group=groups.tp)
        if groups.dp_size > 1:
            expert = is_expert(name)
            if not expert or groups.expert_dp_size > 1:
                dist.all_reduce(parameter.grad, group=groups.expert_dp if expert else groups.dp)
            parameter.grad.div_(groups.dp_size)


def _all_reduce_sum(value: float, group) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor, group=group)
    return float(tensor[0])


def clip_grad_norm(model: torch.nn.Module, max_norm: float, groups: Groups) -> float:
    """The global L2 norm of the gradient (each distinct shard once); clipped in place to max_norm."""
    replicated = tensor_parallel = expert = 0.0
    for name, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        square = float(parameter.grad.double().pow(2).sum())
        if is_expert(name):
            expert += square
        elif is_tensor_parallel(name):
            tensor_parallel += square
        else:
            replicated += square
    if dist.is_initialized() and dist.get_world_size() > 1:
        tensor_parallel = _all_reduce_sum(tensor_parallel, groups.tp)
        expert = _all_reduce_sum(expert, groups.expert_mp)
    norm = math.sqrt(replicated + tensor_parallel + expert)
    scale = max_norm / (norm + 1e-6)
    if scale < 1.0:
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(scale)
    return norm
