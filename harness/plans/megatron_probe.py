"""Ask the installed megatron-core whether it would start a plan: its own config checks and layouts.

Every answer comes from megatron-core's code in this environment: `TransformerConfig` with the
plan's sizes (its ValueErrors and assertions), `initialize_model_parallel` under torch's fake
process group of the plan's world size, `get_num_layers_to_build` per pipeline stage, the expert
divisibility assertion of `MoELayer`, and the Gated DeltaNet layer's own answer to packed input.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import inspect
import warnings
from types import SimpleNamespace

from .plan_format import Plan

# plan field -> TransformerConfig keyword; each is probed alone (the others at 1) to name the culprit
PARALLEL_FIELDS = {
    "parallel.tp": "tensor_model_parallel_size",
    "parallel.pp": "pipeline_model_parallel_size",
    "parallel.cp": "context_parallel_size",
    "parallel.ep": "expert_model_parallel_size",
    "parallel.etp": "expert_tensor_parallel_size",
}


def version() -> str | None:
    """megatron-core's version here, or None when it is not installed."""
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return None
    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


STAGE_FIELDS = ("parallel.first_stage_layers", "parallel.last_stage_layers")  # megatron's uneven pipeline stages


def stage_fields(plan: Plan) -> list[str]:
    """The uneven pipeline stage fields the plan sets."""
    return [field for field in STAGE_FIELDS if getattr(plan, field.split(".")[1])]


def _config_kwargs(plan: Plan, stages: bool = True, **parallel) -> dict:
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    m = plan.model
    fields = {f.name for f in __import__("dataclasses").fields(TransformerConfig)}
    kw = dict(num_layers=m.get("num_hidden_layers"), hidden_size=m.get("hidden_size"),
              num_attention_heads=m.get("num_attention_heads"), num_query_groups=m.get("num_key_value_heads"),
              kv_channels=m.get("head_dim") or m.get("hidden_size") // m.get("num_attention_heads"),
              ffn_hidden_size=m.get("intermediate_size") or m.get("moe_intermediate_size"),
              add_bias_linear=False,  # Qwen's linear layers have no bias
              use_cpu_initialization=True, bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16)
    if m.experts:
        kw.update(num_moe_experts=m.experts, moe_ffn_hidden_size=m.get("moe_intermediate_size"),
                  moe_router_topk=m.get("num_experts_per_tok"))
        if m.get("shared_expert_intermediate_size"):
            kw["moe_shared_expert_intermediate_size"] = m.get("shared_expert_intermediate_size")
    if m.has_gdn and "experimental_attention_variant" in fields:
        kw.update(experimental_attention_variant="gated_delta_net",
                  linear_attention_freq=m.get("full_attention_interval") or 4,
                  linear_conv_kernel_dim=m.get("linear_conv_kernel_dim"),
                  linear_key_head_dim=m.get("linear_key_head_dim"),
                  linear_value_head_dim=m.get("linear_value_head_dim"),
                  linear_num_key_heads=m.get("linear_num_key_heads"),
                  linear_num_value_heads=m.get("linear_num_value_heads"))
    if stages and plan.first_stage_layers:
        kw["num_layers_in_first_pipeline_stage"] = plan.first_stage_layers
    if stages and plan.last_stage_layers:
        kw["num_layers_in_last_pipeline_stage"] = plan.last_stage_layers
    kw.update(parallel)
    return kw


def build_config(plan: Plan, stages: bool = True, **parallel):
    """megatron-core's TransformerConfig for the plan (parallel sizes overridable, the uneven stage sizes left out
    when not `stages`); raises what it raises."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerConfig(**_config_kwargs(plan, stages, **parallel))


def gdn_variant_known() -> bool:
    """Whether this megatron-core's TransformerConfig has the Gated DeltaNet variant at all."""
    import dataclasses

    from megatron.core.transformer.transformer_config import TransformerConfig

    return "experimental_attention_variant" in {f.name for f in dataclasses.fields(TransformerConfig)}


def config_rejections(plan: Plan) -> dict[str, str]:
    """plan field -> megatron-core's rejection, probing each parallel size alone, then all together. The uneven
    stage sizes go with pp only; a pp probe that fails with them and passes without them blames them."""
    sizes = {"parallel.tp": plan.tp, "parallel.pp": plan.pp, "parallel.cp": plan.cp, "parallel.ep": plan.ep,
             "parallel.etp": plan.etp}
    found = {}
    ones = dict.fromkeys(PARALLEL_FIELDS.values(), 1)  # etp unset would follow tp: pin every size
    for field, keyword in PARALLEL_FIELDS.items():
        probe = {**ones, keyword: sizes[field]}
        try:
            build_config(plan, field == "parallel.pp", **probe)
        except (ValueError, AssertionError, TypeError) as exc:
            found.update(dict.fromkeys(_culprits(plan, field, probe), f"{type(exc).__name__}: {exc}"))
    if not found:
        try:
            build_config(plan, **{kw: sizes[f] for f, kw in PARALLEL_FIELDS.items()})
        except (ValueError, AssertionError, TypeError) as exc:
            found["parallel"] = f"{type(exc).__name__}: {exc}"
    return found


def _culprits(plan: Plan, field: str, probe: dict) -> list[str]:
    """The fields a failed probe blames: the stage sizes the plan sets when pp without them is accepted."""
    if field != "parallel.pp" or not stage_fields(plan):
        return [field]
    try:
        build_config(plan, False, **probe)
    except (ValueError, AssertionError, TypeError):
        return [field]
    return stage_fields(plan)


def layers_per_stage(plan: Plan) -> list[int]:
    """Decoder layers each pipeline stage builds, from megatron-core's get_num_layers_to_build."""
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    sizes = {**dict.fromkeys(PARALLEL_FIELDS.values(), 1), "pipeline_model_parallel_size": plan.pp}
    config = build_config(plan, **sizes)
    return [get_num_layers_to_build(config, pp_rank=rank) for rank in range(plan.pp)]


class ProcessGroupBusy(RuntimeError):
    """This process already has a real process group, so no fake world can be made here."""


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0):
    """torch's fake process group of `world_size` ranks, this process as `rank`: nothing is sent."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise ProcessGroupBusy("a process group is already initialized; plans need their own fake one")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def world_layout(plan: Plan) -> dict[str, int]:
    """Run megatron-core's initialize_model_parallel for the plan on a fake world; its group sizes."""
    from megatron.core import parallel_state as ps

    kwargs = dict(tensor_model_parallel_size=plan.tp, pipeline_model_parallel_size=plan.pp,
                  context_parallel_size=plan.cp, expert_model_parallel_size=plan.ep,
                  expert_tensor_parallel_size=plan.etp)
    if "create_gloo_process_groups" in inspect.signature(ps.initialize_model_parallel).parameters:
        kwargs["create_gloo_process_groups"] = False  # the fake backend has no gloo twin
    with fake_world(plan.world_size):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ps.initialize_model_parallel(**kwargs)
            return {"dp": ps.get_data_parallel_world_size(),
                    "expert_dp": ps.get_expert_data_parallel_world_size()}
        finally:
            ps.destroy_model_parallel()


def expert_rule_source() -> str | None:
    """The expert-divisibility assertion as written in this megatron-core's moe_layer module, if present."""
    from megatron.core.transformer.moe import moe_layer

    for line in inspect.getsource(moe_layer).splitlines():
        if "num_moe_experts %" in line and "assert" in line:
            return line.strip()
    return None


class _PastTheGuard(Exception):
    """The layer called one of its own methods: it went past any up-front refusal of its input."""


class _AnySize(int):
    """An attribute the stand-in layer lacks: the size 1 in arithmetic; calling it means the forward got
    past its input checks into the computation."""

    def __new__(cls, name: str):
        value = super().__new__(cls, 1)
        value.name = name
        return value

    def __call__(self, *args, **kwargs):
        raise _PastTheGuard(self.name)


class _StandIn:
    """Stands for a GatedDeltaNet instance: no weights, sizes of 1, no sequence parallelism."""

    sp_size = cp_size = tp_size = 1

    def __init__(self, deterministic: bool = False):
        self.config = SimpleNamespace(sequence_parallel=False, deterministic_mode=deterministic)

    def __getattr__(self, name: str):
        return _AnySize(name)


def gdn_refuses_packed() -> tuple[bool | None, str]:
    """Does this megatron-core's GatedDeltaNet refuse packed (THD) input? Asked of the layer itself.

    Its forward runs on a stand-in (no weights) with packed-sequence parameters: 0.16/0.17 raise
    NotImplementedError("GDN does not support packed sequence ...") up front; a release that
    accepts THD goes on into its packed path and calls the layer's own methods, which stops it.
    The answer is megatron-core's default mode (FLA's kernels); where its deterministic_mode (the
    pure-torch rule, what runs without flash-linear-attention) refuses packed input, the answer says so.
    """
    try:
        from megatron.core.ssm.gated_delta_net import GatedDeltaNet
    except ImportError as exc:  # no GDN layer in this release
        return None, f"megatron-core has no GatedDeltaNet ({exc})"
    import torch
    from megatron.core.packed_seq_params import PackedSeqParams

    packed = PackedSeqParams(qkv_format="thd", cu_seqlens_q=torch.tensor([0, 2, 4], dtype=torch.int32),
                             cu_seqlens_kv=torch.tensor([0, 2, 4], dtype=torch.int32), max_seqlen_q=2,
                             max_seqlen_kv=2)
    refuses, answer = _ask(GatedDeltaNet, packed, deterministic=False)
    if refuses is False:
        strict, why = _ask(GatedDeltaNet, packed, deterministic=True)
        if strict:
            answer += (f"; in deterministic_mode it refuses ({why}): packed batches need flash-linear-attention's "
                         "kernels with deterministic_mode off")
    return refuses, answer


def _ask(layer_class, packed, deterministic: bool) -> tuple[bool | None, str]:
    import torch

    try:
        layer_class.forward(_StandIn(deterministic), torch.zeros(4, 1, 8), None, packed_seq_params=packed)
    except AssertionError as exc:
        if deterministic and "deterministic" in str(exc).lower():
            return True, f"GatedDeltaNet.forward raises AssertionError: {exc}"
        return None, f"GatedDeltaNet.forward on the probe stopped with AssertionError: {exc}"
    except NotImplementedError as exc:
        if "packed" in str(exc).lower():
            return True, f"GatedDeltaNet.forward raises NotImplementedError: {exc}"
        return None, f"GatedDeltaNet.forward refused the probe for another reason: {exc}"
    except _PastTheGuard as exc:
        return False, f"GatedDeltaNet.forward takes packed input (went on to {exc})"
    except Exception as exc:  # noqa: BLE001 - the stand-in fails somewhere past the guard; say where
        return None, f"GatedDeltaNet.forward on the probe stopped with {type(exc).__name__}: {exc}"
    return False, "GatedDeltaNet.forward takes packed input"
