"""patch-parity: every patch of the trainer gives the stock numbers; packed equals unpacked.

Verdicts, on the text, vision-language and MoE tiny models where each applies (at two layers, one Gated DeltaNet and
one full attention: trainers.models.ONE_OF_EACH; packed-sp and verl's forwards keep the zoo's four):
  target-audit:*        every patch target exists in the installed transformers / torch_npu / vLLM
  patched-vs-stock:*    outputs and gradients with the patch against without it, per dtype
  packed-vs-unpacked:*  the trainer's packed path against each sequence run alone
  packed-stock-upstream[-position-ids]   upstream: what stock transformers does with packed rows
  packed-sp:text        a 2-rank sequence-parallel forward of a packed row against each sequence alone (gloo);
                        in a verl row also verl:packed-sp:text, a skip naming why verl's side needs a GPU
                        (packed_sp.py)
  fused-logprob:T=*     chunked log-probs / entropy against log_softmax at the same temperature
  rollout-vs-trainer:*  the rollout engine's sampled-token log-probs against the trainer's
  npu-parity:*          NPU op patches against the torch reference (from trainers.patches.npu_ops)
  verl:<type>/*         in a row that installs verl: verl's own Qwen3.5 forwards through its FSDP engine against
                        stock, packed and padded, and the gated delta net path verl takes (verl_forwards)
The check fails if any verdict fails; `affected` verdicts report upstream's behaviour.
Asked for its part that needs no accelerator (harness.checks.cpu_part_only: the CPU pre-flight of an accelerator
cell), it gives the target audit alone; the numeric verdicts await a runner.
The trainer's models and inputs are built on the CPU whatever the cell's device (verl's forwards excepted): on an
accelerator cell the message says that its numbers are the CPU's.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from harness.checks import CheckOptions, cpu_part_only
from harness.checks.patch_parity.inputs import Tolerance
from harness.checks.support import verl
from harness.results.records import CheckResult, Status, Verdict

NAME = "patch-parity"

# The one tolerance table of this check. "output": max abs error of logits / log-probs /
# entropies; "grad": max abs gradient error relative to the largest stock gradient; "rollout":
# max abs error of engine log-probs against the trainer's. float32 is tight: measured errors
# are ~1e-6, and a leak across packed sequences is ~5e-2. bfloat16 allows one or two units in
# the last place of logits of magnitude ~4 (spacing 2^-5); a perturbation of 1e-2 is caught
# in float32 only.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(output=1e-5, grad=1e-5, rollout=1e-4),
    "bfloat16": Tolerance(output=5e-2, grad=5e-2, rollout=1e-1),
}


def _overrides(options: CheckOptions) -> dict:
    if options.model_config is None:
        return {}
    return {options.model: json.loads(options.model_config.read_text(encoding="utf-8"))}


def _npu_op_verdicts(seed: int) -> list[Verdict]:
    from harness.checks.patch_parity.inputs import DTYPES
    from trainers.patches import npu_ops  # a project module: missing is an error, never a skip

    return [v for dtype in TOLERANCES for v in npu_ops.op_parity_verdicts(DTYPES[dtype], seed=seed)]


def overall(verdicts: list[Verdict]) -> tuple[Status, str]:
    failed = [v.name for v in verdicts if v.status.is_failure]
    counts = {s.value: sum(v.status is s for v in verdicts) for s in Status if any(v.status is s for v in verdicts)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if failed:
        return Status.FAIL, f"{len(failed)} verdict(s) failed: {', '.join(failed)} ({summary})"
    return Status.PASS, f"all patches match stock ({summary})"


def run(options: CheckOptions) -> CheckResult:
    from harness.checks.patch_parity.audit import audit_verdicts
    from harness.checks.patch_parity.fused import fused_verdicts, rollout_vs_trainer
    from harness.checks.patch_parity.inputs import Models
    from harness.checks.patch_parity.packed import packed_vs_unpacked, stock_upstream_verdicts
    from harness.checks.patch_parity.packed_sp import packed_sp_verdicts
    from harness.checks.patch_parity.stock import patched_vs_stock_verdicts
    from trainers.models import Qwen35Unavailable
    from trainers.patches import all_patches
    from trainers.runtime.device import detect_device_type, set_cpu_threads

    set_cpu_threads()
    cell_device = detect_device_type()  # first: a device that is not there errors before any model is built
    patches = all_patches()
    verdicts = audit_verdicts(patches)
    if cpu_part_only():  # no model is built: the numbers are the device's to give
        status, message = overall(verdicts)
        if status is Status.PASS:
            message = f"{len(verdicts)} audit verdicts, no target missing"
        return CheckResult(NAME, status, f"target audit only, the numeric verdicts await a runner: {message}",
                           verdicts=verdicts,
                           metrics={"part": "target audit", "patches": [p.name for p in patches]})
    models = Models(options.seed, _overrides(options))
    try:
        models.get(options.model)
    except Qwen35Unavailable as exc:
        return CheckResult(NAME, Status.SKIP, str(exc).split(":")[0], verdicts=verdicts,
                           metrics={"qwen35_available": False})

    seed, timings = options.seed, {}
    sections = (  # packed-sp first: its ranks fork from this process where no section has started threads yet
        ("packed_sp", lambda: packed_sp_verdicts(TOLERANCES["float32"].output, seed,
                                                 Path(options.work_dir) / NAME, options.max_ranks)),
        ("patched_vs_stock", lambda: patched_vs_stock_verdicts(patches, models, TOLERANCES, seed)),
        ("packed_vs_unpacked", lambda: packed_vs_unpacked(models, TOLERANCES, seed)),
        ("packed_stock_upstream", lambda: stock_upstream_verdicts(models, TOLERANCES["float32"], seed)),
        ("fused_logprob", lambda: fused_verdicts(models, TOLERANCES, seed)),
        ("rollout_vs_trainer", lambda: rollout_vs_trainer(models, TOLERANCES, seed)),
        ("npu_op_parity", lambda: _npu_op_verdicts(seed)),
    )
    if verl.installed():  # a verl row: verl's own Qwen3.5 forwards against stock, last (its patch is process-wide)
        from harness.checks.patch_parity.verl_forwards import verl_verdicts

        forwards = lambda: verl_verdicts(seed, TOLERANCES["float32"].output)  # noqa: E731
        sections += (("verl", lambda: verl.guarded("forwards", forwards)),)
    for section, produce in sections:
        start = time.perf_counter()
        verdicts.extend(produce())
        timings[section] = round(time.perf_counter() - start, 2)
    status, message = overall(verdicts)
    metrics = {"qwen35_available": True, "seconds": timings, "patches": [p.name for p in patches],
               "model_overrides": models.overrides,
               "tolerances": {dtype: vars(tol) for dtype, tol in TOLERANCES.items()},
               "device": "cpu", "cell_device": cell_device}
    return CheckResult(NAME, status, on_the_cpu(message, cell_device), metrics=metrics, verdicts=verdicts)


def on_the_cpu(message: str, cell_device: str) -> str:
    """The check's message, saying on its face where the cell's device is not the CPU: the models and inputs are
    built on the CPU whatever the cell's device (a GPU run's numbers here are the CPU's)."""
    if cell_device == "cpu":
        return message
    return f"{message}; computed on the CPU, not on the cell's {cell_device}: patch-parity does not follow the device"
