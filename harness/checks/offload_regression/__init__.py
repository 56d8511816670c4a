"""offload-regression: the vision position embedding under FSDP2 CPU offload.

Two verdicts:
- `upstream`: stock transformers under offload. `affected` where the 5.2-5.8 position-embedding
  bug reproduces (the lookup indices are built on the offloaded weight's device, not the compute
  device), `pass` where it does not.
- `trainer`: the same with the trainer's patch (`trainers.patches.pos_embed`), or with stock code
  where no patch applies because upstream fixed the bug. Must pass on every version.

Each verdict is computed two ways. (a) The meta-device emulation (`harness.checks.offload_regression.emulation`):
the weight lives on `meta` between calls and is real only inside `pos_embed`'s own forward.
(b) Real FSDP2 with `CPUOffloadPolicy` and `pos_embed` as its own unit, 2 ranks
(`fsdp_worker`): on CPU forked from the check's process (harness.checks.support.forked_ranks: no torchrun
start, no second import of torch and transformers), on accelerators under torchrun. On a CPU-only
machine the compute device *is* the CPU, so (b) cannot show the bug: there (a) decides and (b) is
recorded as evidence. On CUDA and NPU, (b) decides.

The bug is detected by behaviour: the forward raised and the index reaching `pos_embed` was not
on its weight's device. A pass also needs the loss and the `pos_embed` gradient to equal those of
a run without offload. `run(options, trainer_method="stock")` runs the trainer verdict with the
unpatched method (a deliberately broken patch): the check must then fail where the bug exists.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.checks import CheckOptions
from harness.checks.support import torchrun
from harness.results.records import CheckResult, Status, Verdict

NAME = "offload-regression"
WORKER = "harness.checks.offload_regression.fsdp_worker"
FSDP_TIMEOUT = 300.0  # seconds for the real-FSDP2 ranks; a torchrun start alone costs 5-8 s
FSDP_RANKS = 2
EMULATION_NOTE = "emulated: FSDP2 CPU offload emulated with the meta device"
CPU_FSDP_NOTE = ("real FSDP2 CPU offload on a CPU-only machine: the compute device is the CPU, so indices "
                 "built on the offloaded weight's device land on the right device; this run cannot show the "
                 "bug and is evidence only (the meta-device emulation decides on CPU)")


def _close(a: float | None, b: float | None, rtol: float) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-3)


def _evidence(p: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    keys = ("raised", "error_class", "error_site", "error", "loss", "pos_embed_grad_norm", "calls", "outside",
            "patches", "seconds")
    out = {k: p[k] for k in keys if k in p}
    out["reference_loss"] = ref.get("loss")
    out["reference_pos_embed_grad_norm"] = ref.get("pos_embed_grad_norm")
    return out


def judge(name: str, p: dict[str, Any], ref: dict[str, Any], rtol: float) -> tuple[Status, str]:
    """Status and message of one verdict from what its pass saw (see the worker's pass schema)."""
    if ref.get("raised"):
        return Status.ERROR, (f"the reference run without offload failed: {ref.get('error_class')} at "
                              f"{ref.get('error_site')}")
    mismatched = [c for c in p.get("calls", []) if c["mismatch"]]
    if mismatched:
        c = mismatched[0]
        what = (f"pos_embed index on {c['input_devices']}, weight on {c['weight_device']}"
                + (f"; {p['error_class']} at {p['error_site']}" if p.get("raised") else ""))
        if name == "upstream":
            return Status.AFFECTED, f"position-embedding offload bug reproduced: {what}"
        return Status.FAIL, f"trainer code still builds the index on the offloaded weight's device: {what}"
    if p.get("raised"):
        status = Status.FAIL if name == "trainer" else Status.ERROR
        return status, (f"forward under offload failed without a pos_embed device mismatch: {p['error_class']} "
                        f"at {p['error_site']}")
    same = _close(p.get("loss"), ref.get("loss"), rtol) and _close(
        p.get("pos_embed_grad_norm"), ref.get("pos_embed_grad_norm"), rtol)
    if not same:
        status = Status.FAIL if name == "trainer" else Status.ERROR
        return status, (f"numbers under offload differ from the run without offload: loss {p.get('loss')} vs "
                        f"{ref.get('loss')}, pos_embed grad norm {p.get('pos_embed_grad_norm')} vs "
                        f"{ref.get('pos_embed_grad_norm')} (rtol {rtol})")
    return Status.PASS, f"forward and backward under offload give the numbers of the run without offload (rtol {rtol})"


def emulated_passes(options: CheckOptions, device, trainer_method: str) -> dict[str, dict[str, Any]]:
    """reference (no offload), trainer and upstream passes under the meta-device emulation."""
    from harness.checks.offload_regression.emulation import emulate_cpu_offload
    from harness.checks.offload_regression.fsdp_worker import (
        error_site,
        patches_applied,
        trainer_patches,
        vision_batch,
        vision_step,
    )
    from trainers.models import build_model

    model = build_model("vl", options.model_config, seed=options.seed).to(device)
    pos_embed = model.model.visual.pos_embed
    batch = vision_batch(model.config, options.seed, device)
    passes: dict[str, dict[str, Any]] = {}
    for name in ("reference", "trainer", "upstream"):
        model.zero_grad(set_to_none=True)
        patches = trainer_patches(trainer_method) if name == "trainer" else []
        result: dict[str, Any] = {"patches": [p.name for p in patches], "calls": []}
        start = time.perf_counter()
        if name == "reference":
            result.update(loss=vision_step(model, batch), raised=False)
        else:
            with patches_applied(patches), emulate_cpu_offload(pos_embed) as emulation:
                try:
                    result.update(loss=vision_step(model, batch), raised=False)
                except Exception as exc:  # noqa: BLE001  (any failure is evidence: class, site, devices)
                    result.update(raised=True, error_class=type(exc).__name__, error_site=error_site(exc))
            result["calls"] = [c.to_dict() for c in emulation.calls]
        grad = pos_embed.weight.grad
        result["pos_embed_grad_norm"] = None if grad is None else float(grad.double().norm())
        result["seconds"] = round(time.perf_counter() - start, 3)
        passes[name] = result
    model.zero_grad(set_to_none=True)
    return passes


def _fsdp_files(out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    result, log = out_dir / "fsdp_offload.json", out_dir / "fsdp_offload.log"
    result.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    return result, log


def _fork_fsdp(options: CheckOptions, trainer_method: str, out_dir: Path):
    """CPU: fork the 2 ranks now; the emulation runs in this process meanwhile."""
    from harness.checks.support.forked_ranks import ForkedRanks

    result, log = _fsdp_files(out_dir)
    config = None if options.model_config is None else str(options.model_config)

    def rank() -> None:  # the worker is looked up in the rank, so a broken one crashes there, as under torchrun
        importlib.import_module(WORKER).worker(result, trainer_method, options.seed, config, "cpu")

    return ForkedRanks(rank, FSDP_RANKS, log, {"OMP_NUM_THREADS": "1"}), result, log


def _collect_forked(ranks, result: Path, log: Path) -> tuple[dict | None, Status, str]:
    with ranks:
        outcome = ranks.wait(FSDP_TIMEOUT)
    if outcome.timed_out:
        return None, Status.TIMEOUT, f"the FSDP2 ranks did not finish within {FSDP_TIMEOUT:.0f} s (log {log.name})"
    if not outcome.ok or not result.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return None, Status.CRASH, f"FSDP2 ranks exited with {outcome.exit_codes}: {' | '.join(tail)}"
    return json.loads(result.read_text(encoding="utf-8")), Status.PASS, ""


def _launch_fsdp(options: CheckOptions, plan, trainer_method: str,
                 out_dir: Path) -> tuple[subprocess.Popen, Path, Path]:
    """Accelerators: start the torchrun job now; the emulation runs while it starts."""
    import torch

    ranks = max(1, min(FSDP_RANKS, getattr(torch, plan.type).device_count()))
    result, log = _fsdp_files(out_dir)
    args = ["--out", str(result), "--trainer-method", trainer_method, "--seed", str(options.seed),
            "--device", plan.type]
    if options.model_config is not None:
        args += ["--model-config", str(options.model_config)]
    return torchrun.launch(torchrun.command(ranks, WORKER, args), log, {**os.environ, "OMP_NUM_THREADS": "1"}), \
        result, log


def _collect_fsdp(proc: subprocess.Popen, result: Path, log: Path) -> tuple[dict | None, Status, str]:
    returncode = torchrun.wait(proc, FSDP_TIMEOUT)
    if returncode is None:
        return None, Status.TIMEOUT, f"torchrun did not finish within {FSDP_TIMEOUT:.0f} s (log {log.name})"
    if returncode != 0 or not result.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        return None, Status.CRASH, f"torchrun exited with {returncode}: {' | '.join(tail)}"
    return json.loads(result.read_text(encoding="utf-8")), Status.PASS, ""


def _stop(launched) -> None:
    if isinstance(launched, subprocess.Popen):
        torchrun.stop(launched)  # our own torchrun and its ranks only
    else:
        launched.kill()


def _verdicts(passes: dict, source: str, deciding: bool, emulated: bool, rtol: float, note: str) -> list[Verdict]:
    verdicts = []
    for name in ("upstream", "trainer"):
        status, message = judge(name, passes[name], passes["reference"], rtol)
        label = name if deciding else f"{name}/{source}"
        text = f"[{note}] {message}" if note else message
        verdicts.append(Verdict(label, status, text, _evidence(passes[name], passes["reference"]), emulated))
    return verdicts


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


def run(options: CheckOptions, *, trainer_method: str = "project", real_fsdp: bool = True) -> CheckResult:
    import torch
    import transformers

    from harness.checks.offload_regression.fsdp_worker import TRAINER_METHODS
    from trainers.models import Qwen35Unavailable, build_config
    from trainers.patches.pos_embed import PATCHES
    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    if trainer_method not in TRAINER_METHODS:
        raise ValueError(f"trainer_method must be one of {TRAINER_METHODS}, not {trainer_method!r}")
    set_cpu_threads()
    try:
        build_config("vl", options.model_config)
    except Qwen35Unavailable as exc:
        return CheckResult(NAME, Status.SKIP, str(exc).split(":")[0], metrics={"qwen35_available": False})

    plan = device_plan()
    decided_by = "meta-emulation" if plan.type == "cpu" else "real-fsdp2"
    rtol = 1e-2 if plan.mixed_precision else 1e-5
    metrics: dict[str, Any] = {
        "transformers": transformers.__version__, "torch": torch.__version__, "device": plan.type,
        "model": "vl", "decided_by": decided_by, "trainer_method": trainer_method, "rtol": rtol,
        "patches": {p.name: p.applicable()[1] for p in PATCHES},
    }
    if not real_fsdp and plan.type != "cpu":
        raise ValueError("on an accelerator real FSDP2 decides the verdicts: real_fsdp=False is for CPU only")
    start = time.perf_counter()
    out_dir = Path(options.work_dir) / "offload_regression"
    launched, collect = None, None
    if real_fsdp:
        forked = plan.type == "cpu"
        launched = (_fork_fsdp(options, trainer_method, out_dir) if forked
                    else _launch_fsdp(options, plan, trainer_method, out_dir))
        collect = _collect_forked if forked else _collect_fsdp
    try:
        verdicts = _verdicts(emulated_passes(options, plan.device(0), trainer_method), "meta-emulation",
                             deciding=plan.type == "cpu", emulated=True, rtol=1e-5, note=EMULATION_NOTE)
    except BaseException:
        if launched is not None:  # do not leave our ranks behind
            _stop(launched[0])
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
            verdicts += _verdicts(report["passes"], "real-fsdp2", deciding=plan.type != "cpu", emulated=False,
                                  rtol=rtol, note=CPU_FSDP_NOTE if plan.type == "cpu" else "")
    verdicts.sort(key=lambda v: ("/" in v.name, v.name != "upstream"))
    status = overall(verdicts)
    by_name = {v.name: v for v in verdicts}
    message = (f"upstream {by_name['upstream'].status.value}, trainer {by_name['trainer'].status.value} "
               f"(decided by {decided_by}" + (", emulated" if plan.type == "cpu" else "") + ")")
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts)
