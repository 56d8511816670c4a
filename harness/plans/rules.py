"""The start-up rules of a launch plan: one `Finding` per rule, each naming the plan field it is about.

Megatron rules are asked of the installed megatron-core (`megatron_probe`); where it is not
installed the same divisibility rules are checked as arithmetic and the rest is reported as
`unchecked`, never as passed. The rollout rule is vLLM's own (read from its code when vLLM is
installed, otherwise stated with its source).
"""
from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from trainers.patches.base import defined_statically

from . import megatron_probe
from .plan_format import Plan

OK, FAIL, UNCHECKED = "ok", "fail", "unchecked"


@dataclass(frozen=True)
class Finding:
    field: str      # the plan field the rule is about, e.g. "parallel.tp"
    status: str     # ok | fail | unchecked (and verdict.ERROR for an estimate that raised)
    message: str    # one line
    source: str = ""  # where the rule came from (which code, which version)

    def line(self) -> str:
        tail = f" [{self.source}]" if self.source else ""
        return f"{self.status:9} {self.field}: {self.message}{tail}"


def _divides(field: str, size: int, things: dict[str, int], source: str) -> list[Finding]:
    out = []
    for name, count in things.items():
        if count and count % size:
            out.append(Finding(field, FAIL, f"{size} does not divide {name} ({count})", source))
    if not out:
        listed = ", ".join(f"{n} {c}" for n, c in things.items() if c)
        out.append(Finding(field, OK, f"{size} divides {listed}", source))
    return out


def world_rules(plan: Plan) -> list[Finding]:
    """Arithmetic of the device counts (megatron-core checks its own layout again in megatron_rules)."""
    out = []
    model_size = plan.tp * plan.pp * plan.cp
    if plan.backend == "megatron":
        if plan.world_size % model_size:
            out.append(Finding("cluster", FAIL, f"world size {plan.world_size} ({plan.nodes}x{plan.devices_per_node}) "
                               f"is not a multiple of tp*pp*cp = {model_size}"))
        else:
            out.append(Finding("cluster", OK, f"world size {plan.world_size}: data-parallel size "
                               f"{plan.world_size // model_size}"))
    elif model_size * plan.ep * plan.etp != 1:
        out.append(Finding("parallel", FAIL, "an fsdp plan shards over data parallel only; tp/pp/cp/ep/etp must be 1"))
    else:
        out.append(Finding("cluster", OK, f"FSDP2 shards over all {plan.world_size} devices"))
    return out


def rollout_rules(plan: Plan) -> list[Finding]:
    """vLLM's tensor-parallel rule for this model: heads, KV heads and GDN heads split evenly."""
    m, tp = plan.model, plan.rollout_tp
    if plan.rollout_engine == "none":
        return []
    source = _vllm_rule_source()
    things = {"attention heads": m.get("num_attention_heads")}
    if m.has_gdn:
        things.update({"GDN key heads": m.get("linear_num_key_heads"),
                       "GDN value heads": m.get("linear_num_value_heads")})
    out = _divides("rollout.tp", tp, things, source)
    kv = m.get("num_key_value_heads")
    if kv % tp and tp % kv:  # vLLM replicates KV heads when TP exceeds them, if evenly
        out.append(Finding("rollout.tp", FAIL, f"{tp} is neither a multiple nor a divisor of KV heads ({kv})", source))
    if plan.rollout_world_size % tp:
        out.append(Finding("rollout.tp", FAIL, f"{tp} does not divide the rollout devices ({plan.rollout_world_size})"))
    return out


# Where vLLM's ModelConfig is defined, by release (vllm/config/model.py from 0.11, one config.py before): read as text,
# since importing vllm.config takes 2.5 to 5 s on one CPU core, which launch-plans would spend on every vLLM cell.
VLLM_CONFIG_FILES = ("config/model.py", "config/__init__.py", "config.py")


def _vllm_rule_source() -> str:
    spec = importlib.util.find_spec("vllm")  # the lookup is recorded: a result reused elsewhere needs this vLLM
    if spec is None:
        return "vLLM not installed here: rule of vLLM's ModelConfig.verify_with_parallel_config and its GDN layer"
    text = _model_config_method(spec.submodule_search_locations or [], "verify_with_parallel_config")
    if text is None:
        return ("the installed vLLM's ModelConfig.verify_with_parallel_config was not found in its source; rule as in "
                "earlier vLLM")
    if "total_num_attention_heads % tensor_parallel_size" in text:
        return "read from the installed vLLM's ModelConfig.verify_with_parallel_config"
    return "the installed vLLM's ModelConfig no longer states the heads rule as expected; rule as in earlier vLLM"


def _model_config_method(package_dirs, method: str) -> str | None:
    """The source of `ModelConfig.<method>` in the installed vLLM's files, without importing vLLM; None if absent."""
    for folder in package_dirs:
        for name in VLLM_CONFIG_FILES:
            path = Path(folder, name)
            try:
                source = path.read_text(encoding="utf-8")
                tree = ast.parse(source)
            except (OSError, SyntaxError, ValueError):
                continue
            node = defined_statically(tree, ["ModelConfig", method])[-1]
            if isinstance(node, ast.FunctionDef):
                return ast.get_source_segment(source, node)
    return None


def megatron_rules(plan: Plan) -> list[Finding]:
    if plan.backend != "megatron":
        return []
    version = megatron_probe.version()
    if version is None:
        return _megatron_arithmetic(plan) + [
            Finding("parallel", UNCHECKED, "megatron-core not installed: TransformerConfig, world layout and "
                    "pipeline split not checked by megatron-core itself"),
            Finding("parallel.cp", UNCHECKED,
                    "megatron-core not installed: context parallel with Gated DeltaNet not checked"),
            Finding("batch.remove_padding", UNCHECKED,
                    "megatron-core not installed: packed sequences with Gated DeltaNet not checked"),
        ]
    src = f"megatron-core {version}"
    out: list[Finding] = []
    if plan.model.has_gdn and not megatron_probe.gdn_variant_known():
        out.append(Finding("plan.model", FAIL, "this megatron-core has no Gated DeltaNet variant "
                           "(TransformerConfig.experimental_attention_variant)", src))
    rejected = megatron_probe.config_rejections(plan)
    for field in (*megatron_probe.PARALLEL_FIELDS, *megatron_probe.STAGE_FIELDS, "parallel"):
        if field in rejected:
            out.append(Finding(field, FAIL, f"TransformerConfig rejects it: {rejected[field]}", src))
    if not rejected:
        out.append(Finding("parallel", OK, f"TransformerConfig accepts tp={plan.tp} pp={plan.pp} cp={plan.cp} "
                           f"ep={plan.ep} etp={plan.etp}", src))
        out += _pipeline(plan, src)
    out += _experts(plan, src)
    out += _layout(plan, src)
    out += _packed(plan, src)
    return out


def _pipeline(plan: Plan, src: str) -> list[Finding]:
    try:
        stages = megatron_probe.layers_per_stage(plan)
    except (AssertionError, ValueError) as exc:
        if megatron_probe.stage_fields(plan):
            return [Finding(field, FAIL, f"get_num_layers_to_build: {exc or type(exc).__name__}", src)
                    for field in megatron_probe.stage_fields(plan)]
        return [Finding("parallel.pp", FAIL, f"get_num_layers_to_build: {exc or type(exc).__name__}; set "
                        "parallel.first_stage_layers / last_stage_layers for an uneven split", src)]
    if sum(stages) != plan.model.get("num_hidden_layers"):
        return [Finding(field, FAIL, f"stages build {stages} layers, {sum(stages)} of "
                        f"{plan.model.get('num_hidden_layers')}", src)
                for field in megatron_probe.stage_fields(plan) or ["parallel.pp"]]
    return [Finding("parallel.pp", OK, f"layers per stage {stages}", src)]


def _experts(plan: Plan, src: str) -> list[Finding]:
    m = plan.model
    if not m.experts:
        if plan.ep * plan.etp != 1:
            return [Finding("parallel.ep", FAIL, f"{m.name} has no experts; ep and etp must be 1")]
        return []
    rule = megatron_probe.expert_rule_source()
    out = []
    if rule is None:
        out.append(Finding("parallel.ep", UNCHECKED, "MoELayer states no expert-divisibility assertion here; "
                           "checked as arithmetic", src))
    out += _divides("parallel.ep", plan.ep, {"experts": m.experts}, f"{src} MoELayer: {rule}" if rule else "arithmetic")
    out += _divides("parallel.etp", plan.etp, {"expert FFN width": m.get("moe_intermediate_size")},
                    "expert tensor parallel splits each expert's FFN columns")
    return out


def _layout(plan: Plan, src: str) -> list[Finding]:
    try:
        groups = megatron_probe.world_layout(plan)
    except megatron_probe.ProcessGroupBusy as exc:
        return [Finding("cluster", UNCHECKED, str(exc), src)]
    except (RuntimeError, AssertionError, ValueError) as exc:
        return [Finding("cluster", FAIL, f"initialize_model_parallel on {plan.world_size} ranks: {exc}", src)]
    return [Finding("cluster", OK, f"initialize_model_parallel on {plan.world_size} ranks: data parallel "
                    f"{groups['dp']}, expert data parallel {groups['expert_dp']}", src)]


def _packed(plan: Plan, src: str) -> list[Finding]:
    if not plan.model.has_gdn:
        return [Finding("batch.remove_padding", OK, f"{plan.model.name} has no Gated DeltaNet layers")]
    refuses, answer = megatron_probe.gdn_refuses_packed()
    out = []
    if plan.remove_padding and refuses:
        out.append(Finding("batch.remove_padding", FAIL, f"true, but this megatron-core's GDN refuses packed "
                           f"(THD) input: {answer}", src))
    elif plan.remove_padding and refuses is None:
        out.append(Finding("batch.remove_padding", UNCHECKED, answer, src))
    elif plan.remove_padding:
        out.append(Finding("batch.remove_padding", OK, f"true; {answer}", src))
    else:
        note = {True: "required here", False: "this megatron-core would take true as well"}.get(refuses, answer)
        out.append(Finding("batch.remove_padding", OK, f"false: padded (BSHD) batches ({note})", src))
    if plan.dynamic_bsz and not plan.remove_padding:
        out.append(Finding("batch.dynamic_bsz", FAIL, "true needs remove_padding (token-packed micro-batches); "
                           "verl requires dynamic_bsz=false with padded batches"))
    return out


def _megatron_arithmetic(plan: Plan) -> list[Finding]:
    """Without megatron-core: the divisibility rules its TransformerConfig would apply, as plain arithmetic."""
    m, src = plan.model, "arithmetic (megatron-core not installed)"
    out = _divides("parallel.tp", plan.tp, {"attention heads": m.get("num_attention_heads"),
                                            "KV groups": m.get("num_key_value_heads"),
                                            "GDN key heads": m.get("linear_num_key_heads") if m.has_gdn else 0,
                                            "GDN value heads": m.get("linear_num_value_heads") if m.has_gdn else 0},
                   src)
    if not (plan.first_stage_layers or plan.last_stage_layers):
        out += _divides("parallel.pp", plan.pp, {"layers": m.get("num_hidden_layers")}, src)
    else:
        out += _uneven_stages(plan, src)
    if m.experts:
        out += _divides("parallel.ep", plan.ep, {"experts": m.experts}, src)
    out += _expert_ranks(plan, src)
    return out


def _expert_ranks(plan: Plan, src: str) -> list[Finding]:
    """initialize_model_parallel's expert layout as arithmetic: each pipeline stage's ranks split into expert
    groups of etp*ep ranks (the world must be a multiple of etp*ep*pp)."""
    group = plan.ep * plan.etp
    if group == 1 or plan.world_size % plan.pp:  # one expert rank per group, or the world rule already fails
        return []
    per_stage = plan.world_size // plan.pp
    if per_stage % group:
        return [Finding("parallel.ep", FAIL, f"ep*etp = {group} does not divide the {per_stage} ranks of a pipeline "
                        f"stage (world size {plan.world_size} / pp {plan.pp})", src)]
    return [Finding("parallel.ep", OK, f"ep*etp = {group} divides the {per_stage} ranks of a pipeline stage", src)]


def _uneven_stages(plan: Plan, src: str) -> list[Finding]:
    """The uneven stage sizes as arithmetic: a pipeline to make uneven, and the layers left for the middle
    stages splitting evenly over them (what megatron-core's TransformerConfig asks)."""
    fields = megatron_probe.stage_fields(plan)
    layers = plan.model.get("num_hidden_layers")
    if plan.pp == 1:
        return [Finding(field, FAIL, "set, but parallel.pp = 1: there are no pipeline stages to make uneven", src)
                for field in fields]
    middle = plan.pp - len(fields)
    uneven = plan.first_stage_layers + plan.last_stage_layers
    rest = layers - uneven
    if rest < 0:
        return [Finding(field, FAIL, f"the uneven stages take {uneven} layers, more than the model's {layers}", src)
                for field in fields]
    if (middle == 0 and rest) or (middle and rest % middle):
        return [Finding(field, FAIL, f"leaves {rest} of {layers} layers for {middle} middle stages: not an even "
                        "split", src) for field in fields]
    return [Finding(field, OK, f"{layers - rest} layers in the uneven stages, {rest} over {middle} middle stages",
                    src) for field in fields]


def fsdp_rules(plan: Plan) -> list[Finding]:
    if plan.backend != "fsdp" or not plan.model.has_gdn or not plan.remove_padding:
        return []
    if importlib.util.find_spec("fla") is not None:
        return [Finding("batch.remove_padding", OK, "flash-linear-attention is installed: transformers' GDN keeps "
                        "packed sequences apart")]
    return [Finding("batch.remove_padding", UNCHECKED,
                    "true needs flash-linear-attention on the cluster (transformers' "
                    "torch fallback ignores or refuses packed GDN input); not installed here")]


def check(plan: Plan) -> list[Finding]:
    """Every start-up rule for the plan, in a fixed order."""
    return world_rules(plan) + megatron_rules(plan) + fsdp_rules(plan) + rollout_rules(plan)
