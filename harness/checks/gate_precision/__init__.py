"""gate-precision: the Gated DeltaNet's A_log and dt_bias under FSDP2 mixed precision (bf16 parameters, fp32 reduce).

A_log is exponentiated into the decay that the linear-attention recurrence compounds over the sequence, and
dt_bias shifts its time step; rounded to bf16 they change every decay (NeMo Automodel #2484, #1869), and the
rollout engines keep A_log in float32. FSDP2's MixedPrecisionPolicy casts every parameter of a unit to its
param_dtype for the forward, so a bf16 policy rounds them unless they sit in a float32 unit.

On the text and MoE tiny models (`trainers/models.py`, dt_bias moved off bf16's grid as a trained checkpoint's
is), on one rank of a process group of the check's own process (real `fully_shard`; the question is per
parameter, so one rank answers it), with the trainer's policy (`parallelize.BF16_POLICY`) applied on every
device, including the CPU, where the trainer itself trains in float32:
- `upstream`: stock transformers sharded plainly (`fully_shard` on each `_no_split_modules` block and the root):
  the dtype of A_log and dt_bias where the forward uses them; `affected` where bf16.
- `trainer`: the trainer's `parallelize`: A_log and dt_bias must be float32 as stored and in the forward, or
  the check fails naming them.
- `upstream/load`: what transformers itself keeps in float32 (its `_keep_in_fp32_modules` declarations, and the
  gates' dtype after `from_pretrained(..., dtype=torch.bfloat16)`); `affected` where they load as bf16.
- `verl:fsdp2-policy`, in a row that installs verl: verl's `apply_fsdp2` with its FSDP engine's default policy.
Each side's verdict lists the parameters its forward sees in float32 and the log-probs' drift from a float32
reference; the check's message adds the drift of bf16 compute with the gates rounded and with them kept
float32, all else equal, and of float32 compute with only the gates rounded.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from harness.checks import CheckOptions
from harness.results.records import CheckResult, Status

from . import verdicts

NAME = "gate-precision"
MODELS = ("text", "moe")  # the kinds with Gated DeltaNet layers of their own class (VL's text model is text's)


def _plain_shard(mesh, policy):
    """Stock sharding: each block the model names (`_no_split_modules`) and the root, one policy for all."""
    from torch.distributed.fsdp import fully_shard

    def shard(model) -> None:
        blocks = set(model._no_split_modules or ())
        for module in list(model.modules()):
            if type(module).__name__ in blocks:
                fully_shard(module, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)

    return shard


def _trainer_shard(mesh, plan):
    from trainers.fsdp.parallelize import parallelize

    def shard(model) -> None:
        parallelize(model, plan, mesh=mesh, shard="always")

    return shard


def measure(kind: str, options: CheckOptions, plan, mesh) -> dict[str, Any]:
    """Everything the verdicts need about one model kind (see verdicts' module docstring)."""
    from harness.checks.gate_precision import probes
    from trainers import models
    from trainers.fsdp.parallelize import BF16_POLICY

    device = plan.device()
    model = models.build_model(kind, options.model_config, seed=options.seed).to(device)
    probes.off_the_bf16_grid(model, options.seed)
    load = probes.loaded_dtypes(model, Path(options.work_dir) / "gate_precision" / kind)
    ids = probes.token_batch(model.config.vocab_size, options.seed, device)
    reference = probes.logprobs(model, ids)
    return {"upstream": probes.sharded_run(model, _plain_shard(mesh, BF16_POLICY), ids, reference),
            "trainer": probes.sharded_run(model, _trainer_shard(mesh, plan), ids, reference),
            "cast": probes.cast_runs(model, ids, reference), "load": load}


def run(options: CheckOptions) -> CheckResult:
    import torch
    import transformers

    from harness.checks.gate_precision import probes
    from harness.checks.support import verl
    from trainers.models import Qwen35Unavailable, build_config
    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    try:
        build_config("text", options.model_config)
    except Qwen35Unavailable as exc:
        return CheckResult(NAME, Status.SKIP, str(exc).split(":")[0], metrics={"qwen35_available": False})
    plan = dataclasses.replace(device_plan(), mixed_precision=True)  # the trainer's policy, on every device
    policy = "MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)"
    start = time.perf_counter()
    with probes.one_rank_mesh(plan.type, plan.dist_backend) as mesh:
        models = {kind: measure(kind, options, plan, mesh) for kind in MODELS}
        found = [*verdicts.sharded_verdicts(models, policy), verdicts.load_verdict(models)]
        if verl.installed():
            from harness.checks.gate_precision import verl_policy

            found += verl.guarded("fsdp2-policy", lambda: [verl_policy.verdict(options, plan, mesh)])
    status = verdicts.overall(found)
    by_name = {v.name: v for v in found}
    message = (f"upstream {by_name['upstream'].status.value}, trainer {by_name['trainer'].status.value}, "
               f"transformers' bf16 load {by_name['upstream/load'].status.value}; {verdicts.cast_summary(models)}")
    metrics = {"transformers": transformers.__version__, "torch": torch.__version__, "device": plan.type,
               "policy": policy, "ranks": 1, "tokens": [probes.BATCH, probes.LENGTH], "models": list(MODELS),
               "cast_drift": {kind: m["cast"] for kind, m in models.items()},
               "seconds": round(time.perf_counter() - start, 2)}
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=found)
