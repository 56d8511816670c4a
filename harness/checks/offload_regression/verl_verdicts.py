"""offload-regression's `verl:` verdicts, in a row that installs verl: the model set up by verl's own FSDP2 path with
verl's monkey patch, one verdict per site verl's compute meets.

Two parts, per model type (qwen3_5, qwen3_5_moe, qwen3_5_text):
- real FSDP2 on 2 ranks (`verl_fsdp`): verl's apply_fsdp2 and fsdp2_load_full_state_dict with CPU offload, then one
  step of verl's engine; it measures verl's FSDP units and where verl's load leaves every buffer. Forked from the
  check's process on CPU (support.ranks), torchrun on accelerators, started and collected as the check's own ranks
  (real_fsdp);
- the strict device emulation fed with those units and that placement (`verl_emulation`).
On CPU the emulation decides, marked emulated, and the real run is evidence (`verl:<type>/real-fsdp2`: the units,
the placement, the step against the same step without FSDP). On CUDA and NPU the real run decides `step` and
`pos-embed` (verl's own CPUOffloadPolicy(pin_memory=True)), and the emulation's verdicts keep a `/strict-emulation`
suffix.

Verdicts: `verl:<type>/step` (the step raised, its numbers differ, or it meets a host tensor in device compute);
`verl:<type>/pos-embed` on the VL types (the index fast_pos_embed_interpolate builds against pos_embed's offloaded
weight; from transformers 5.9 the method is never called, and the verdict says the fix is not needed rather than
passing because of verl); `verl:<type>/<Module><tensor>` for every other site verl's compute meets.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from harness.checks import CheckOptions
from harness.checks.support import verl, verl_engine
from harness.results.records import Status, Verdict

WORKER = "harness.checks.offload_regression.verl_fsdp"
RANKS = 2
NOTE = ("emulated: strict device semantics on the CPU, with the FSDP units and buffer placement verl's own "
        "apply_fsdp2 and fsdp2_load_full_state_dict made on the ranks")
PRELOAD = ("verl.utils.fsdp_utils", "verl.utils.model", "verl.models.transformers.monkey_patch",
           "verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.padding",
           "verl.experimental.agent_loop.agent_loop", "verl.models.transformers.qwen3_5")


def _real_fsdp(options: CheckOptions, plan, out_dir: Path) -> tuple[dict | None, Status, str]:
    """verl_fsdp on its ranks: forked on CPU (verl imported here first, so that they share it), torchrun elsewhere."""
    from harness.checks.offload_regression import real_fsdp
    from harness.checks.support.ranks import ForkedRanks, preload, start_torchrun, torchrun_command

    out_dir.mkdir(parents=True, exist_ok=True)
    result, log = out_dir / "verl_fsdp.json", out_dir / "verl_fsdp.log"
    result.unlink(missing_ok=True)
    if plan.type == "cpu":
        from harness.checks.offload_regression import verl_fsdp

        preload(*PRELOAD)
        ranks = ForkedRanks(lambda: verl_fsdp.worker(result, options.seed, "cpu"), RANKS, log, {"OMP_NUM_THREADS": "1"})
        return real_fsdp.collect_forked(ranks, result, log)
    count = max(1, min(RANKS, plan.device_count()))
    args = ["--out", str(result), "--seed", str(options.seed), "--device", plan.type]
    process = start_torchrun(torchrun_command(count, WORKER, args), log, {**os.environ, "OMP_NUM_THREADS": "1"})
    return real_fsdp.collect(process, result, log)


def _ran(pos_embed: dict | None = None, stepped: bool = True) -> list:
    """The verl functions behind a verdict: verl's load and patch; with `stepped` its FSDP2 set-up and engine step;
    and verl's fast_pos_embed_interpolate where the vision model's class held it."""
    from verl.utils.fsdp_utils import apply_fsdp2, fsdp2_load_full_state_dict, get_init_weight_context_manager

    engine = verl_engine.verl_functions()
    ran = [get_init_weight_context_manager, engine.pop("apply_monkey_patch")]
    if stepped:
        ran += [apply_fsdp2, fsdp2_load_full_state_dict, *engine.values()]
    if pos_embed and pos_embed.get("verl_method"):
        from verl.models.transformers import qwen3_5

        ran.append(qwen3_5.fast_pos_embed_interpolate)
    return ran


def _failure_text(failure: dict[str, Any]) -> tuple[Status, str]:
    if failure.get("cannot_run_here"):
        return Status.SKIP, f"cannot run on this runner: {failure['cannot_run_here']}"
    return Status.FAIL, f"verl's code raised {failure['error_class']} at {failure['where']}: {failure['error']}"


def _failure_verdicts(model_type: str, failure: dict[str, Any], suffix: str, ran: list) -> list[Verdict]:
    status, message = _failure_text(failure)
    names = ["step", "pos-embed"] if model_type in verl_engine.VISION_TYPES else ["step"]
    return [verl.verdict(f"{model_type}/{name}{suffix}", status, message, ran, {"failure": failure})
            for name in names]


def _is_pos_embed(site: dict[str, Any]) -> bool:
    return "fast_pos_embed_interpolate" in site["key"] or any("pos_embed" in m for m in site["modules"])


def _pos_embed_message(seen: dict[str, Any], site: dict[str, Any] | None) -> tuple[Status, str]:
    """The pos-embed verdict from what pos_embed and the patched method saw (and the site, if one was met)."""
    if site is not None:
        return Status.FAIL, (f"{site['key']} met device compute from the host in {', '.join(site['modules'])} "
                             f"({', '.join(site['where'])}): the vision model's fast_pos_embed_interpolate is "
                             f"{seen.get('method')}")
    if seen.get("index_off_weight_device"):
        return Status.FAIL, (f"pos_embed's index is off its weight's device: {seen['embedding_calls'][:1]} "
                             f"(fast_pos_embed_interpolate is {seen.get('method')})")
    if not seen.get("method_calls"):
        return Status.PASS, ("patch target not called: the fix is not needed on this release (the vision model never "
                             f"calls fast_pos_embed_interpolate; {seen.get('method') or 'the method is gone'})")
    whose = "verl's" if seen.get("verl_method") else f"not verl's ({seen.get('method')})"
    return Status.PASS, (f"the vision model called fast_pos_embed_interpolate {seen['method_calls']} times, {whose}: "
                         "its index stays on the weight's device")


def emulation_verdicts(model_type: str, emulated: dict[str, Any], suffix: str, ran: list) -> list[Verdict]:
    """step, pos-embed and one verdict per other site, from verl_emulation.emulated_step; `ran`: the verl functions
    behind them (_ran)."""
    from harness.checks.offload_regression.model_passes import site_label

    seen = emulated.get("pos_embed") or {}
    sites = list(emulated["sites"].values())
    out = []
    for site in sites:
        if not _is_pos_embed(site):
            label = site_label(model_type, site).split(":", 1)[1]
            out.append(verl.verdict(f"{model_type}/{label}{suffix}", Status.FAIL, f"[{NOTE}] {site['key']} met device "
                                    f"compute from the host in {', '.join(site['modules'])} ({', '.join(site['where'])}"
                                    f"; {site['count']} calls)", ran, {"site": site}, emulated=True))
    if model_type in verl_engine.VISION_TYPES:
        status, message = _pos_embed_message(seen, next((s for s in sites if _is_pos_embed(s)), None))
        out.append(verl.verdict(f"{model_type}/pos-embed{suffix}", status, f"[{NOTE}] {message}", ran,
                                {"pos_embed": seen}, emulated=True))
    if emulated["raised"]:
        status, message = Status.FAIL, f"the step raised {emulated['error_class']} at {emulated['error_site']}"
    elif not emulated["same_loss"]:
        status, message = Status.FAIL, (f"the loss under the emulation {emulated['loss']} differs from the same step "
                                        f"without it {emulated['reference_loss']}")
    elif sites:  # on an accelerator the step would fail at the first of them
        labels = [site_label(model_type, site).split(":", 1)[1] for site in sites]
        status, message = Status.FAIL, (f"forward and backward meet {len(sites)} host tensors in device compute, each "
                                        f"its own verdict: {', '.join(labels)}")
    else:
        status, message = Status.PASS, ("forward and backward meet no host tensor in device compute; the loss equals "
                                        "the same step without the emulation")
    metrics = {k: emulated.get(k) for k in ("units", "device_buffers", "loss", "reference_loss", "seconds")}
    out.append(verl.verdict(f"{model_type}/step{suffix}", status, f"[{NOTE}] {message}", ran, metrics,
                            emulated=True))
    return out


def real_verdicts(model_type: str, real: dict[str, Any], deciding: bool, ran: list) -> list[Verdict]:
    """On an accelerator: step and pos-embed from the real run. On CPU: one verdict of evidence (real-fsdp2)."""
    if deciding and "failure" in real:
        return _failure_verdicts(model_type, real["failure"], "", ran)
    seen = real.get("pos_embed") or {}
    setup = f"CPUOffloadPolicy(pin_memory={real['pin_memory']}), {real['param_dtype']} parameters"
    metrics = {k: real.get(k) for k in ("units", "placement", "loss", "reference_loss", "max_abs_logprob_err",
                                        "seconds", "pin_memory", "param_dtype", "failure")}
    if "failure" in real:
        status, numbers = _failure_text(real["failure"])
        numbers = f"the step: {numbers}"
    else:
        rtol = 1e-5 if real["param_dtype"] == "float32" else 1e-2
        same = abs(real["loss"] - real["reference_loss"]) <= rtol * max(1.0, abs(real["reference_loss"]))
        status = Status.PASS if same else Status.FAIL
        numbers = (f"loss {real['loss']:.6g} against {real['reference_loss']:.6g} without FSDP (rtol {rtol:g}), "
                   f"max abs log-prob error {real['max_abs_logprob_err']:.3g}")
    if deciding:
        out = [verl.verdict(f"{model_type}/step", status, f"real FSDP2 with verl's set-up ({setup}): {numbers}", ran,
                            metrics)]
        if model_type in verl_engine.VISION_TYPES:
            pos_status, message = _pos_embed_message(seen, None)
            out.append(verl.verdict(f"{model_type}/pos-embed", pos_status, f"real FSDP2 with verl's set-up: {message}",
                                    ran, {"pos_embed": seen}))
        return out
    placed = real["placement"]
    message = (f"[real FSDP2 on CPU ranks, evidence: the compute device is the CPU, so this run cannot show a site] "
               f"verl's apply_fsdp2 made {len(real['units'])} units ({', '.join(real['units'])}); verl's load left "
               f"{len(placed['buffers_on_device'])} buffers on the device ({', '.join(placed['buffers_on_device'])}) "
               f"and the parameters on the {'/'.join(placed['parameters_last_moved_to']) or 'host'}; {numbers} "
               f"({setup})")
    return [verl.verdict(f"{model_type}/real-fsdp2", status, message, ran, metrics)]


def verl_part(options: CheckOptions, plan, out_dir: Path) -> tuple[list[Verdict], dict[str, Any]]:
    """Every verl verdict of offload-regression in this row, and what it took."""
    from harness.checks.offload_regression.verl_emulation import emulated_step

    start = time.perf_counter()
    report, status, message = _real_fsdp(options, plan, out_dir)
    metrics: dict[str, Any] = {"real_fsdp2_seconds": round(time.perf_counter() - start, 2)}
    if report is None:
        return [verl.verdict(f"{t}/step", status, f"verl's FSDP2 ranks: {message}", _ran(stepped=False))
                for t in verl_engine.MODEL_TYPES], metrics
    metrics["platform"] = report.get("platform")
    deciding_real = plan.type != "cpu"
    suffix = "/strict-emulation" if deciding_real else ""
    verdicts: list[Verdict] = []
    for model_type, real in report["models"].items():
        if "failure" in real and "units" not in real:  # verl's set-up itself failed: nothing to emulate
            verdicts += _failure_verdicts(model_type, real["failure"], "", _ran(stepped=False))
            continue
        emulation_start = time.perf_counter()
        try:
            emulated = emulated_step(model_type, real["units"], set(real["placement"]["buffers_on_device"]),
                                     options.seed)
            emulated["seconds"] = round(time.perf_counter() - emulation_start, 2)
            verdicts += emulation_verdicts(model_type, emulated, suffix, _ran(emulated["pos_embed"]))
        except Exception as exc:  # noqa: BLE001 - verl's code failing is the finding (or cannot run here)
            verdicts += _failure_verdicts(model_type, verl_engine.failure(exc), suffix, _ran())
        verdicts += real_verdicts(model_type, real, deciding_real, _ran(real.get("pos_embed")))
    metrics["seconds"] = round(time.perf_counter() - start, 2)
    return verdicts, metrics


def with_verl(status: Status, message: str, verdicts: list[Verdict]) -> tuple[Status, str]:
    """The check fails where a deciding verl verdict fails: a verl row is about what verl's code does. Evidence that
    does not decide on this runner (real-fsdp2 on a CPU, the emulation on an accelerator) keeps its own status."""
    failed = [v.name for v in verdicts if v.name.startswith(verl.PREFIX) and v.status.is_failure
              and not v.name.endswith(("/real-fsdp2", "/strict-emulation"))]
    if not failed:
        return status, message
    status = status if status.is_failure else Status.FAIL
    return status, f"{message}; verl: {len(failed)} failed ({', '.join(failed)})"
