"""bridge-parity: Hugging Face and megatron-core agree on the same Qwen3.5 weights, hybrid and MoE.

The models are the zoo's tiny Qwen3.5 text model (3 Gated DeltaNet layers, 1 full-attention
layer) and Qwen3.5-MoE (the same layers, every MLP a MoE with a gated shared expert), built in
megatron-core from its own GatedDeltaNet, attention and MoELayer (trainers/megatron/layer_specs.py).
Three jobs run one after the other: TP=1 (one rank), TP=2 and EP=2 (2 CPU ranks each), each rank
forked from this process (harness.checks.support.ranks: torchrun's environment, without a launcher and ranks
that import torch, transformers and megatron-core again, which would take most of the check's time); the
worker is harness.checks.bridge_parity.ranks's `main`, the same as `python -m harness.checks.bridge_parity.ranks` under
torchrun. `max_ranks` (the matrix's `[matrix] max_ranks`, `harness check --max-ranks`) keeps only the jobs
of at most that many ranks: 1 runs TP=1 alone, for a one-GPU runner. Per model and job one verdict, holding:
- forward: log-probs of a left-padded BSHD batch on real tokens, max abs error <= LOGPROB_ATOL;
- round trip: HF -> Megatron (sharded) -> HF bitwise equal;
- gradients: the same loss through both, the Megatron gradients reduced as the trainer reduces
  them (grads.py) and mapped back: max over parameters of max|diff| / max|g_hf| <= GRAD_RTOL.
`packed-gdn` records what megatron-core's GatedDeltaNet does with packed (THD) input, measured by
calling it: refused (0.16.1: NotImplementedError) -> pass, the reason for use_remove_padding=False;
accepted and keeps sequences apart -> pass; accepted but leaks state across them -> fail.
Where megatron-core's GDN refuses packed input only in the deterministic mode the harness sets (no FLA),
the probe asks it again outside that mode (packed.py) and the verdict says which refused. With FLA's kernels
emulated there, every comparison but one runs megatron-core's own torch rule on both sides, so the packed
output is also held to transformers' GatedDeltaNet on the same weights, each sequence alone; that verdict
is marked emulated, and fails without the reference.
MTP on (mtp.py): in every job each hybrid case also saves its model, and the text case the zoo's VL model, as
a checkpoint carrying one MTP layer as released Qwen3.5 checkpoints lay it out (top-level `mtp.*`,
trainers/mtp.py), converts it HF -> Megatron (megatron-core's MTP block) -> HF through the project mapping on
the job's ranks, and holds every tensor, MTP included, to the checkpoint bit for bit under its released name:
`<model>-mtp-<job>` (text-hybrid, vl-hybrid, moe-hybrid) fails naming each tensor unwritten, renamed or
different; the verdicts above are MTP off. A VL checkpoint's vision tower is outside the project mapping
(counted in the verdict, not compared).
`text-full-attention-tp1` (every layer full attention) is an extra comparison, not the Megatron
verdict. Each verdict names the bridge that converted the weights (message and metrics). The worst error
of every comparison is NaN where any is, and a non-finite gradient fails its verdict.
Where megatron-bridge is installed three more jobs (TP=1, TP=2, EP=2) run Megatron-Bridge's own
Qwen35Bridge and Qwen35MoEBridge end to end (library.py: its AutoBridge, provider, load and export), with
five verdicts per model and job,
`megatron-bridge/<model>-<job>/{roundtrip,logprobs,grads,project-mapping,mtp-roundtrip}` (megatron_bridge.py),
and `megatron-bridge/vl` and `megatron-bridge/vl/mtp-roundtrip` skips naming the lines of its VL provider that
build the vision tower from Transformer Engine. `roundtrip`, `project-mapping` and `mtp-roundtrip` measure
Megatron-Bridge's conversion; `mtp-roundtrip` is MTP on: the case's model saved with one MTP layer, built by
Megatron-Bridge's provider with its MTP block (on CPU in TE's layout, te_layout.mtp_block_spec: the provider's
own asks for Transformer Engine's), loaded and exported by it, every tensor held to the checkpoint as above, and
the Megatron MTP parameters it has no mapping for named. `logprobs` and `grads` run its weights through layers
that on CPU are this project's (the CPU
TE-layout spec, te_layout.py: MaskedGatedDeltaNet, CpuRMSNorm, CpuLayerNormColumnParallelLinear), with this
project's logits and gradient reduction: they are marked emulated and name those stand-ins. On CPU two
stand-ins make the run possible and each result records them: an import-only Transformer Engine for the one
module that imports it unguarded (te_import.py), and that layer spec for the provider; the provider
settings changed for CPU are listed with the code that needs each. Where megatron-bridge is installed (the
row pins it) and `import megatron.bridge` fails, its verdicts are errors, not skips. A verdict named for
Megatron-Bridge that another bridge produced fails. Metrics keep the bridges' own errors and the names the
kernel shim bound where FLA / Transformer Engine are absent. The bridges are asked whether they map each model
once, in the check's own process after the project's jobs and before Megatron-Bridge's TE stand-in
(`ask_bridges`): the project's ranks import no bridge library, Megatron-Bridge's preload reuses what asking
imported, and the answer is kept for the cell's later checks.
SKIP where megatron-core or Qwen3.5 is not installed.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import time
from pathlib import Path

from harness.checks import CheckOptions
from harness.checks.bridge_parity import megatron_bridge, mtp
from harness.checks.support.ranks import run_job
from harness.results.records import CheckResult, Status, Verdict
from trainers.worst import worst

NAME = "bridge-parity"
# fp32 on CPU, measured 9.5e-7 for every model and job (fused QKV and in_proj matmuls, mask
# value -1e4 vs -inf, RoPE from the row start vs each row's first token).
LOGPROB_ATOL = 1e-4
# Measured at most 1.4e-3 (A_log of a GDN layer: megatron-core's and HF's fp32 chunked recurrences
# summed over every position); a gradient left unreduced or mapped wrong is off by 0.5 or more.
GRAD_RTOL = 1e-2
WORKER_TIMEOUT = 480.0
THREADS = {"OMP_NUM_THREADS": "1"}
# job -> (tensor parallel, expert parallel, cases); Megatron-Bridge's run where megatron-bridge is installed
JOBS = {"tp1": (1, 1, "text-hybrid,moe-hybrid,text-full-attention"),
        "tp2": (2, 1, "text-hybrid,moe-hybrid"),
        "ep2": (1, 2, "moe-hybrid"),
        **{job: (tp, ep, ",".join(megatron_bridge.PREFIX + case for case in cases))
           for job, (tp, ep, cases) in megatron_bridge.JOBS.items()}}
# the zoo models the project's jobs build (case "<kind>-<variant>"): the bridges are asked about each (every variant
# of a kind has its model type)
SUPPORT_KINDS = {case.split("-", 1)[0] for job, (_, _, cases) in JOBS.items() if job not in megatron_bridge.JOBS
                 for case in cases.split(",")}


def default_jobs(max_ranks: int | None, library: bool) -> tuple[str, ...]:
    """The jobs to run: those of at most `max_ranks` ranks (None: all), Megatron-Bridge's only with `library`."""
    return tuple(job for job, (tp, ep, _) in JOBS.items()
                 if (max_ranks is None or tp * ep <= max_ranks) and (library or job not in megatron_bridge.JOBS))


def _run_job(job: str, options: CheckOptions, work: Path, broken: str | None, timeout: float) -> tuple[dict, str]:
    """One job on its ranks, forked from this process (torchrun's where forking is unsafe: see
    harness.checks.support.ranks); (what rank 0 wrote, {} if a rank failed or ran out of time; "forked" or
    "torchrun")."""
    from harness.checks.bridge_parity import ranks as parity

    tp, ep, cases = JOBS[job]
    out, log = work / f"{job}.json", work / f"{job}.log"
    out.unlink(missing_ok=True)
    log.unlink(missing_ok=True)  # the ranks append to it
    args = ["--tp", str(tp), "--ep", str(ep), "--cases", cases, "--seed", str(options.seed), "--out", str(out)]
    if broken:
        args += ["--break", broken]
    ok, launcher = run_job(parity.main, "harness.checks.bridge_parity.ranks", args, tp * ep, log, timeout, THREADS)
    return (json.loads(out.read_text()) if ok and out.exists() else {}), launcher


def _log_tail(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-1500:] if path.exists() else ""


def parity_verdict(name: str, data: dict | None, log: Path) -> Verdict:
    """One model on one job: forward, round trip and gradients against their tolerances."""
    if data is None:
        return Verdict(name, Status.FAIL, f"worker produced no result; log tail: {_log_tail(log)}")
    if "error" in data:  # megatron-core (or the mapping) raised: the message is its own
        return Verdict(name, Status.FAIL, data["error"], metrics={"tp": data.get("tp"), "ep": data.get("ep")})
    error, grad = data["max_abs_logprob_error"], data["max_rel_grad_error"]
    metrics = {key: data.get(key) for key in ("tp", "ep", "bridge", "max_abs_logprob_error", "max_rel_grad_error",
                                               "worst_grad", "max_rel_grad_error_gdn", "grads_compared",
                                               "nonfinite_grads",
                                               "gated_delta_net_layers", "roundtrip_exact", "seconds")}
    metrics.update({"tolerance": LOGPROB_ATOL, "grad_tolerance": GRAD_RTOL,
                    "roundtrip_mismatched": data["roundtrip_mismatched"][:10]})
    problems = []
    if not data["finite"] or not error <= LOGPROB_ATOL:
        problems.append(f"log-prob error {error:.3g} > {LOGPROB_ATOL}")
    if not data["roundtrip_exact"]:
        problems.append(f"round trip not exact ({len(data['roundtrip_mismatched'])} tensors differ)")
    if not grad <= GRAD_RTOL:
        problems.append(f"gradient error {grad:.3g} > {GRAD_RTOL} ({data['worst_grad']})")
    if data.get("nonfinite_grads"):
        problems.append(f"non-finite gradients in {data['nonfinite_grads'][:5]}")
    if problems:
        return Verdict(name, Status.FAIL, f"bridge {data.get('bridge')}: " + "; ".join(problems), metrics=metrics)
    return Verdict(name, Status.PASS, f"bridge {data.get('bridge')}: log-prob error {error:.2g} <= {LOGPROB_ATOL}; "
                   f"gradients within {grad:.2g} <= {GRAD_RTOL}; round trip bitwise exact", metrics=metrics)


def project_verdicts(job: str, results: dict, work: Path) -> list[Verdict]:
    """The project mapping's verdicts of one job: per model MTP off (`<model>-<job>`) and, for the hybrid cases,
    MTP on (`<model>-mtp-<job>`, the VL model's beside the text model's: mtp.py)."""
    tp, ep, cases = JOBS[job]
    out = []
    for case in cases.split(","):
        data = results.get(case)
        out.append(parity_verdict(f"{case}-{job}", data, work / f"{job}.log"))
        for model in mtp.MODELS.get(case, ()):
            out.append(mtp.verdict(f"{model}-mtp-{job}", ((data or {}).get("mtp") or {}).get(model),
                                   mtp.PROJECT_MAPPING, tp, ep))
    return out


def packed_verdict(data: dict | None) -> Verdict:
    """What megatron-core's GatedDeltaNet does with packed input, blaming the harness's deterministic mode,
    not megatron-core, where only that mode refuses."""
    probe = (data or {}).get("packed")
    version = _version("megatron-core")
    if probe is None:
        return Verdict("packed-gdn", Status.FAIL, "no packed-input measurement (the hybrid model did not build)")
    metrics = {"megatron_core": version, **probe}
    own = f"megatron-core {version}'s GatedDeltaNet"
    harness_mode = probe.get("deterministic_mode_error")
    if not probe["accepted"] and not harness_mode:
        return Verdict("packed-gdn", Status.PASS, f"{own} refuses packed (THD) input ({probe['error']}): padded "
                       f"batches, use_remove_padding=False", metrics=metrics)
    if not probe["accepted"]:  # the setting refused, and the probe could not ask megatron-core without it
        return Verdict("packed-gdn", Status.FAIL, f"the harness's deterministic_mode refuses packed input "
                       f"({harness_mode}); outside it the probe failed ({probe['error']}), so {own}'s own answer "
                       "is not measured", metrics=metrics)
    is_emulated = bool(probe.get("emulated_kernels"))
    emulated = (f" (emulated: FLA's {' and '.join(probe['emulated_kernels'])} stood in on CPU by megatron-core's "
                "own torch rule, one sequence at a time)" if is_emulated else "")
    setting = (f"; only the harness's deterministic_mode (set where flash-linear-attention is absent) refuses it: "
               f"{harness_mode}" if harness_mode else "")
    judged = _against_reference(probe, is_emulated)
    if not probe["keeps_sequences_apart"]:
        return Verdict("packed-gdn", Status.FAIL, f"{own} accepts packed input{emulated} but leaks state across "
                       f"sequences (max error {probe['max_leak']:.3g}){setting}", metrics=metrics,
                       emulated=is_emulated)
    if probe.get("matches_padded") is False:
        return Verdict("packed-gdn", Status.FAIL, f"{own} accepts packed input{emulated} and keeps sequences apart, "
                       f"but differs from the padded batch (max error {probe['max_padded_error']:.3g}){setting}",
                       metrics=metrics, emulated=is_emulated)
    if judged is not None:
        return Verdict("packed-gdn", Status.FAIL, f"{own} accepts packed input{emulated} and keeps sequences apart, "
                       f"but {judged}{setting}", metrics=metrics, emulated=is_emulated)
    padded = (f", and matches the padded batch (max error {probe['max_padded_error']:.2g})"
              if probe.get("max_padded_error") is not None else "")
    reference = (f"; against {probe['reference']}: max error {probe['max_reference_error']:.2g} on outputs up to "
                 f"{probe['reference_scale']:.2g}" if probe.get("max_reference_error") is not None else "")
    return Verdict("packed-gdn", Status.PASS, f"{own} accepts packed (THD) input{emulated} and keeps sequences "
                   f"apart (max error {probe['max_leak']:.2g}){padded}{reference}{setting}", metrics=metrics,
                   emulated=is_emulated)


def _against_reference(probe: dict, emulated: bool) -> str | None:
    """Why the packed output is not held to an independent implementation ('differs from ...', 'is held to no
    ...'), or None where it matches one. With emulated kernels every other comparison runs megatron-core's own
    recurrence on both sides, so a reference is required there."""
    if probe.get("matches_reference") is False:
        return (f"differs from {probe['reference']} (max error {probe['max_reference_error']:.3g} on outputs up to "
                f"{probe['reference_scale']:.3g})")
    if emulated and probe.get("matches_reference") is None:
        return ("is held to no implementation but megatron-core's own (its torch rule on every side of the "
                "comparison), so whether the recurrence is right is not measured")
    return None


def ask_bridges() -> dict[str, dict]:
    """{model kind: the bridges' answer for it} (trainers/megatron/bridge.py bridge_support), asked in this process
    once the project's jobs are done: their ranks import no bridge library, and where Megatron-Bridge is
    installed its jobs' preload reuses what asking imported (about 5 s of a core, measured), instead of one rank
    importing it to ask and this process again to preload. The answer is kept for the cell's later checks (the
    trainer's ranks read it)."""
    from trainers.megatron import bridge
    from trainers.models import build_config

    return {kind: bridge.bridge_support(build_config(kind)) for kind in sorted(SUPPORT_KINDS)}


def _asked(seconds: dict) -> dict[str, dict]:
    """ask_bridges, its time kept in `seconds` (the check's seconds_by_part)."""
    started = time.perf_counter()
    support = ask_bridges()
    seconds["bridge-support"] = round(time.perf_counter() - started, 2)
    return support


def _record_support(results: dict, support: dict[str, dict]) -> None:
    """Each project case's result records the bridges' answer for its model and the bridge that converted it."""
    from trainers.megatron import bridge

    for data in results.values():
        if isinstance(data, dict) and "model" in data and data["model"] in support:
            data["bridge_support"] = support[data["model"]]
            data["bridge"] = bridge.chosen_bridge(data["bridge_support"])


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def _skip_reason() -> str | None:
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return "megatron-core is not installed in this cell"
    try:  # a spec lookup, not an import: the workers pay the import, not the harness
        qwen35 = importlib.util.find_spec("transformers.models.qwen3_5") is not None
    except ModuleNotFoundError:
        qwen35 = False
    return None if qwen35 else f"Qwen3.5 is unavailable in transformers {_version('transformers')}"


def run(options: CheckOptions, broken: str | None = None, jobs: tuple[str, ...] | None = None) -> CheckResult:
    skip = _skip_reason()
    if skip:
        return CheckResult(NAME, Status.SKIP, skip)
    version = megatron_bridge.installed_version()
    if jobs is None:
        jobs = default_jobs(options.max_ranks, version is not None)
    work = Path(options.work_dir) / "bridge-parity"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from harness.checks.support.ranks import preload, preload_trainer

    preload("harness.checks.bridge_parity.ranks", "trainers.megatron.model", "trainers.megatron.mapping")
    preload_trainer("trainers.megatron")  # with megatron-core, which the ranks import only to build their models
    results, launchers, seconds = {}, {}, {"preload": round(time.perf_counter() - started, 2)}
    support = None
    for job in jobs:  # forked ranks die with this process (and are killed on any exception)
        job_started = time.perf_counter()
        if job in megatron_bridge.JOBS and support is None:
            from harness.checks.bridge_parity import library

            support = _asked(seconds)  # before the TE stand-in below: what the trainer's own process is told
            job_started = time.perf_counter()
            library.preload()  # after the project's jobs: their ranks never see Megatron-Bridge imported
            seconds["megatron-bridge-preload"] = round(time.perf_counter() - job_started, 2)
            job_started = time.perf_counter()
        results[job], launchers[job] = _run_job(job, options, work, broken,
                                                max(1.0, WORKER_TIMEOUT - (time.perf_counter() - started)))
        seconds[job] = round(time.perf_counter() - job_started, 2)
    project_jobs = [job for job in jobs if job not in megatron_bridge.JOBS]
    if support is None:
        support = _asked(seconds)
    for job in project_jobs:
        _record_support(results[job], support)
    verdicts = [verdict for job in project_jobs for verdict in project_verdicts(job, results[job], work)]
    if "tp1" in jobs:
        verdicts.append(packed_verdict(results["tp1"].get("text-hybrid")))
    for job in (job for job in jobs if job in megatron_bridge.JOBS):
        verdicts += megatron_bridge.verdicts(job, results[job], version, LOGPROB_ATOL, GRAD_RTOL,
                                             _log_tail(work / f"{job}.log"))
    verdicts = [megatron_bridge.attributed(v) for v in verdicts]
    library = next((results[job] for job in jobs if job in megatron_bridge.JOBS), {})
    case = next((c for r in results.values() for c in r.values() if isinstance(c, dict) and "bridge_support" in c), {})
    support = case.get("bridge_support", {})
    kernels = next((r["kernels"] for r in results.values() if "kernels" in r), {})
    metrics = {"bridge": case.get("bridge"), "mbridge": support.get("mbridge"),
               "mbridge_error": support.get("mbridge_error"), "megatron_bridge": support.get("megatron_bridge"),
               "megatron_bridge_error": support.get("megatron_bridge_error"),
               "megatron_bridge_import": library.get("import"),
               "megatron_bridge_overrides": next((library[c]["overrides"] for c in reversed(megatron_bridge.CASES)
                                                  if "overrides" in library.get(c, {})), None),  # MoE's: all apply
               "max_ranks": options.max_ranks,
               "megatron_core": _version("megatron-core"),
               **kernels, "tolerance": LOGPROB_ATOL, "grad_tolerance": GRAD_RTOL,
               "max_abs_logprob_error": worst((v.metrics.get("max_abs_logprob_error") or 0.0 for v in verdicts),
                                              default=0.0),
               "max_rel_grad_error": worst((v.metrics.get("max_rel_grad_error") or 0.0 for v in verdicts),
                                           default=0.0),
               "seconds": round(time.perf_counter() - started, 2), "seconds_by_part": seconds,
               "deliberately_broken": broken,
               "ranks": launchers}
    failed = [v.name for v in verdicts if v.status == Status.FAIL]
    errored = [v for v in verdicts if v.status == Status.ERROR]
    if failed or errored:  # an error (a pinned Megatron-Bridge that does not import) is never a pass
        parts = ([f"failed: {', '.join(failed)}"] if failed else []) + [f"{v.name}: {v.message}" for v in errored[:1]]
        return CheckResult(NAME, Status.FAIL if failed else Status.ERROR, "; ".join(parts), metrics=metrics,
                           verdicts=verdicts)
    return CheckResult(NAME, Status.PASS, "HF and megatron-core agree on hybrid Qwen3.5 and Qwen3.5-MoE "
                       f"({', '.join(project_jobs)}; bridge {metrics['bridge']}){megatron_bridge.summary(verdicts)}",
                       metrics=metrics, verdicts=verdicts)
