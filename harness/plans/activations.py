"""Activation memory of one micro-batch: what autograd keeps for the backward, per decoder layer.

The estimate counts the tensors a Qwen3.5 / Qwen3 decoder layer saves per token (its widths come
from the model config), split over tensor parallel where the heads are split. `measure_saved` counts
what autograd really saves on a model run here, which is how the estimate is validated (docs/launch-plans.md).
With full recompute (Megatron's uniform / HF gradient checkpointing) a layer keeps only its input,
and one layer at a time holds its full activations during its backward.
"""
from __future__ import annotations

from .plan_format import ModelSpec, Plan


def layer_widths(model: ModelSpec, kind: str, tp: int = 1) -> float:
    """Elements saved per token by one decoder layer of `kind` (full_attention | linear_attention)."""
    g = model.get
    h = g("hidden_size")
    if kind == "linear_attention":
        k = g("linear_num_key_heads") * g("linear_key_head_dim")
        v = g("linear_num_value_heads") * g("linear_value_head_dim")
        heads = g("linear_num_value_heads")
        # projections (q, k, v, z, a, b), conv in/out, the recurrence's q/k/v/g/beta,
        # its output, the gated norm's input and gate, the output projection's input
        split = (2 * k + 2 * v + 2 * heads) + 2 * (2 * k + v) + (2 * k + 2 * v + 2 * heads) + 4 * v
    else:
        head_dim = g("head_dim") or h // g("num_attention_heads")
        q = g("num_attention_heads") * head_dim
        kv = g("num_key_value_heads") * head_dim
        gate = q if g("attn_output_gate") else 0
        # q (+ gate), k, v projections, their norms and rotary outputs, attention output, o_proj input
        split = (q + gate + 2 * kv) + 2 * (q + kv) + 2 * q
    # two RMSNorms (input and output each) stay whole; the head-split part divides over TP
    return 4.0 * h + split / tp + mlp_width(model, tp)


def mlp_width(model: ModelSpec, tp: int = 1) -> float:
    g = model.get
    h = g("hidden_size")
    if g("num_experts"):
        top_k, inter = g("num_experts_per_tok"), g("moe_intermediate_size")
        shared = g("shared_expert_intermediate_size") or 0
        # router logits and probabilities; per chosen expert: the token copy, gate/up, activation input
        # and output; the shared expert likewise; the weighted combine
        per_expert = h + 2 * inter + 2 * inter + h
        return 2 * g("num_experts") + top_k * per_expert + (h + 4 * shared + 1 if shared else 0) + h
    inter = g("intermediate_size")
    return (2 * inter + 2 * inter) / tp + h  # gate/up outputs, activation in/out, down_proj input


def stage_bytes(plan: Plan, layers: int, last: bool, dtype_bytes: int = 2) -> float:
    """Activation bytes for `layers` layers of one pipeline stage and one micro-batch on one device."""
    tokens = plan.micro_batch * plan.sequence_length / plan.cp
    kinds = plan.model.layer_types
    if not kinds:
        return 0.0
    mean = sum(layer_widths(plan.model, kind, plan.tp) for kind in kinds) / len(kinds)
    largest = max(layer_widths(plan.model, kind, plan.tp) for kind in set(kinds))
    h = plan.model.get("hidden_size")
    if plan.recompute:
        elements = layers * h + largest  # each layer's input, plus one layer recomputed at a time
    else:
        elements = layers * mean
    total = tokens * elements * dtype_bytes
    if last:  # logits in fp32 for the log-probs, vocabulary split over TP
        total += tokens * plan.model.get("vocab_size") / plan.tp * 4
    return total


def measure_saved(model, input_ids) -> int:
    """Bytes autograd saves for the backward of `model(input_ids)` (each storage counted once)."""
    import torch

    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=input_ids).logits.float().sum().backward()
    return sum(seen.values())
