"""offload-regression: the whole model (text, VL, MoE) under FSDP2 CPU offload.

Under FSDP2 CPU offload (parameters offloaded to the host, compute on the accelerator), a tensor that a
module reads in its forward and that is not on the device (a plain attribute, a tensor made on some other
tensor's device, or a buffer where buffers are left on the host) meets device compute from the host, and the
accelerator fails the operation. Each verdict names the set-up it ran: the emulation leaves buffers on the
host with the offloaded parameters; real FSDP2 has `fully_shard` move them to the device, as verl's
`fsdp2_load_full_state_dict` also does. So a buffer site (the rotary `inv_freq` ones) is met only in the
first set-up, not in verl's.

Verdicts (see `site_verdicts`): for every site found, `upstream:<model>:<Module><tensor>` (`affected`
where stock transformers mixes that host tensor in) and `trainer:<model>:<Module><tensor>` (must
pass: the trainer's patch set, `trainers.patches`, carries a fix for every site); and one `upstream`
and one `trainer` verdict over all models.

Computed two ways. (a) The strict device emulation (`strict_device`, `offload_setup`,
`model_passes`): on the CPU, tensors the accelerator would hold report a fake device, and any
operation that mixes them with a host tensor (other than a 0-dim scalar) is recorded with its
module and tensor; forward and backward, numbers compared with a run without offload. (b) Real
FSDP2 with `CPUOffloadPolicy`, 2 ranks (`fsdp_worker`, `real_fsdp`), on the same three models
sharded as the trainer shards them (VL's vision position embedding is its own unit); there an
offload-only failure, or a pos_embed index off its weight's device, is the finding. On a
CPU-only machine the compute device *is* the CPU, so (b) cannot show a mismatch: (a) decides
there and (b) is reported without deciding (`<side>/real-fsdp2`). On CUDA and NPU runners (b) decides `upstream`
and `trainer`, and (a)'s verdicts are kept as `<name>/strict-emulation`.

The models are the zoo's at one layer of each kind (trainers.models.ONE_OF_EACH), or the given model config: a site
is named by its module's class, and one layer of each kind holds every class a site can be in. verl's parts build
verl's own (support/verl_engine.py).

`run(options, trainer_method="stock")` runs the trainer with the stock methods in place of its
offload fixes (a deliberately broken patch set): the check must then fail where a site exists.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.checks import CheckOptions
from harness.checks.support import verl
from harness.results.records import CheckResult, Status, Verdict

NAME = "offload-regression"
WORKER = "harness.checks.offload_regression.fsdp_worker"
CPU_FSDP_NOTE = ("real FSDP2 CPU offload on a CPU-only machine: the compute device is the CPU, so a tensor left "
                 "on the host (or built on an offloaded weight's device) meets no other device; this run cannot "
                 "show a site and does not decide (the strict device emulation decides on CPU)")


def overall(verdicts: list[Verdict]) -> Status:
    """FAIL if any trainer verdict fails; else a harness problem if any; else AFFECTED if the
    deciding upstream verdict is affected; else PASS."""
    if any(v.name.startswith("trainer") and v.status is Status.FAIL for v in verdicts):
        return Status.FAIL
    for v in verdicts:
        if v.status in (Status.ERROR, Status.TIMEOUT, Status.CRASH):
            return v.status
    upstream = next(v for v in verdicts if v.name == "upstream")
    return Status.AFFECTED if upstream.status is Status.AFFECTED else Status.PASS


def _order(verdict: Verdict) -> tuple:
    """Deciding verdicts first (upstream, trainer), then the sites, then the other method's verdicts."""
    name = verdict.name
    return "/" in name, ":" in name, name.split(":", 1)[1] if ":" in name else "", not name.startswith("upstream")


def run(options: CheckOptions, *, trainer_method: str = "project", real_fsdp: bool = True) -> CheckResult:
    import torch
    import transformers

    from harness.checks.offload_regression import real_fsdp as fsdp
    from harness.checks.offload_regression.model_passes import OFFLOAD_FIXES, TRAINER_METHODS, trainer_patches
    from harness.checks.offload_regression.site_verdicts import emulated_passes, site_verdicts
    from trainers.models import Qwen35Unavailable, build_config
    from trainers.patches.training import selected
    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    if trainer_method not in TRAINER_METHODS:
        raise ValueError(f"trainer_method must be one of {TRAINER_METHODS}, not {trainer_method!r}")
    set_cpu_threads()
    try:
        build_config("text", options.model_config)
    except Qwen35Unavailable as exc:
        return CheckResult(NAME, Status.SKIP, str(exc).split(":")[0], metrics={"qwen35_available": False})

    plan = device_plan()
    decided_by = "strict-emulation" if plan.type == "cpu" else "real-fsdp2"
    rtol = 1e-2 if plan.mixed_precision else 1e-5
    metrics: dict[str, Any] = {
        "transformers": transformers.__version__, "torch": torch.__version__, "device": plan.type,
        "models": ["text", "vl", "moe"], "decided_by": decided_by, "trainer_method": trainer_method, "rtol": rtol,
        "buffers": {"strict-emulation": "host (offloaded with the parameters)",
                    "real-fsdp2": "device (moved there by fully_shard)"},
        "patches": {p.name: p.applicable()[1] for p in selected(plan.type) if p.name.startswith(OFFLOAD_FIXES)},
    }
    if not real_fsdp and plan.type != "cpu":
        raise ValueError("on an accelerator real FSDP2 decides the verdicts: real_fsdp=False is for CPU only")
    start = time.perf_counter()
    out_dir = Path(options.work_dir) / "offload_regression"
    launched, collect = None, None
    if real_fsdp:
        forked = plan.type == "cpu"
        launched = (fsdp.fork(options, trainer_method, out_dir, WORKER) if forked
                    else fsdp.launch(options, plan, trainer_method, out_dir, WORKER))
        collect = fsdp.collect_forked if forked else fsdp.collect
    try:  # the emulation runs on the CPU whatever the runner: the trainer's CPU patch set
        passes = emulated_passes(options.model_config, options.seed, trainer_patches(trainer_method, "cpu"))
        verdicts = site_verdicts(passes, deciding=plan.type == "cpu")
    except BaseException:
        if launched is not None:  # do not leave our ranks behind
            fsdp.stop(launched[0])
        raise
    metrics["emulation_seconds"] = round(time.perf_counter() - start, 2)
    if launched is not None:
        report, status, message = collect(*launched)
        metrics["real_fsdp2_seconds"] = round(time.perf_counter() - start, 2)
        if report is None:
            verdicts += [Verdict(f"{n}/real-fsdp2" if plan.type == "cpu" else n, status, message)
                         for n in ("upstream", "trainer")]
        else:
            metrics["real_fsdp2"] = {k: report[k] for k in ("device", "world_size", "torch", "transformers")}
            verdicts += fsdp.verdicts(report["models"], "real-fsdp2", deciding=plan.type != "cpu", emulated=False,
                                      rtol=rtol, note=CPU_FSDP_NOTE if plan.type == "cpu" else "")
    if real_fsdp and verl.installed():  # a verl row: verl's FSDP2 set-up and step beside the project's
        from harness.checks.offload_regression.verl_verdicts import verl_part

        def part() -> list:
            found, metrics["verl"] = verl_part(options, plan, out_dir)
            return found

        verdicts += verl.guarded("offload", part)
    verdicts.sort(key=_order)
    status = overall(verdicts)
    by_name = {v.name: v for v in verdicts}
    sites = sum(":" in v.name and v.name.startswith("upstream") and v.status is Status.AFFECTED for v in verdicts)
    message = (f"upstream {by_name['upstream'].status.value}, trainer {by_name['trainer'].status.value}; "
               f"{sites} sites found upstream (decided by {decided_by}"
               + (", emulated" if plan.type == "cpu" else "") + ")")
    if "verl" in metrics:
        from harness.checks.offload_regression.verl_verdicts import with_verl

        status, message = with_verl(status, message, verdicts)
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts)
