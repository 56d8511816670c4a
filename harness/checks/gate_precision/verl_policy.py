"""gate-precision's verl part, in a row that installs verl: verl's own FSDP2 wrapping, `apply_fsdp2`
(verl/utils/fsdp_utils.py), on the text model with the policy verl's FSDP engine builds by default
(`FSDPEngine._build_fsdp_module`: bf16 parameters, fp32 reduce, forward inputs cast), measured as the upstream
side is: the dtype of A_log and dt_bias where the forward uses them. `affected` where verl's units round them;
a failure where verl's wrapping raises or makes no unit.

The policy is written here as verl's engine writes it (the engine builds it inside a method that also builds the
whole worker); the wrapping, which decides the units and so which parameters share a dtype, is verl's own code.
"""
from __future__ import annotations

from harness.checks import CheckOptions
from harness.results.records import Verdict

PART = "fsdp2-policy"


def verdict(options: CheckOptions, plan, mesh) -> Verdict:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from verl.utils.fsdp_utils import apply_fsdp2

    from harness.checks.gate_precision import probes, verdicts
    from harness.checks.support import verl
    from trainers import models

    device = plan.device()
    model = models.build_model("text", options.model_config, seed=options.seed).to(device)
    probes.off_the_bf16_grid(model, options.seed)
    ids = probes.token_batch(model.config.vocab_size, options.seed, device)
    reference = probes.logprobs(model, ids)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)

    def shard(sharded) -> None:
        apply_fsdp2(sharded, {"mesh": mesh, "mp_policy": policy}, {})

    run = probes.sharded_run(model, shard, ids, reference)
    status, message = verdicts.side_status("text", run, "verl")
    return verl.verdict(PART, status, f"apply_fsdp2 with its engine's default policy (bf16 parameters, fp32 "
                        f"reduce): {message}", ran=[apply_fsdp2],
                        metrics=verdicts.run_metrics(run))
