"""grpo-convergence: a short GRPO run on a tiny Qwen3.5 model must learn, and follow its reference.

The FSDP trainer runs with 2 ranks on CPU for the reference's number of steps and seed: the
command recorded is the torch.distributed.run one; on CPU with Hugging Face rollout the same trainer
runs on ranks forked from the check's process (harness.checks.support.forked_ranks), with no launcher and no
second import of torch and transformers per rank. Three verdicts:
- threshold: the final reward (mean of the last `final_window` steps) exceeds `threshold`;
- gain: final minus initial reward (mean of the first `initial_window` steps) >= `margin`;
- band: the reward curve, smoothed by a moving average of `smooth` steps, stays within `band`
  of the smoothed reference curve at every step (only when seed, steps and model config match
  the reference's, otherwise `skip`).
All tolerances live in trainers/references/grpo_<backend>_<model>.json. That file is rewritten
only by `python -m harness.checks.grpo_convergence --regenerate --model text`, which records
the versions and the command it was made with.

In a fully-async cell (mode axis `fully-async`) the trainer runs with `--mode fully-async` at
staleness 1 and at 2, each against its own reference (grpo_<backend>_<model>_async<K>.json,
made with `--regenerate --mode fully-async --staleness K`), with three more verdicts per run
(async_verdicts): `bounded` (every sample's engine held weights at most K versions old, and the
queue stayed within its capacity), `schedule` (the observed staleness is the configured rule) and
`correction` (stale samples were importance-weighted, with the ratio statistics). The measured
staleness distribution, overlap and importance-sampling statistics are in the metrics.

In a cell with a vLLM the FSDP trainer rolls out with that vLLM (`--rollout vllm`), against the
reference of that engine release, grpo_fsdp_<model>_<engine>-<version>.json (one rank, the vLLM checks'
model config: see vllm_engine), made in its environment with `--regenerate --rollout vllm`. A release
without one is held to threshold and gain; its band is skipped (see grpo_references). The result names
the engine and the reference file.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from harness.checks import CheckOptions
from harness.checks.grpo_convergence import async_verdicts
from harness.checks.grpo_convergence import references as grpo_references
from harness.checks.grpo_convergence.async_verdicts import bounded_verdict  # noqa: F401  (tests call it here)
from harness.checks.grpo_convergence.references import REFERENCES, reference_path  # noqa: F401  (the benchmarks and tests use them here)
from harness.checks.support import torchrun, vllm_engine
from harness.results.records import CheckResult, Status, Verdict, write_json_atomic

NAME = "grpo-convergence"
TRAINER_MODULES = {"fsdp": "trainers.fsdp", "megatron": "trainers.megatron"}  # backend -> module, same flags
NPROC = 2
RUN_TIMEOUT = 800.0  # seconds; below the registry's 900 s for this check
TRAINER_ENV = vllm_engine.ENGINE_ENV  # what a colocated engine needs (one thread per process, a small CPU KV cache)
REGENERATE_TIMEOUT = 3600.0  # a deliberate one-off; a vLLM engine on a loaded machine can take minutes to start
# Used only when a reference file is first created; afterwards the file is the authority.
DEFAULT_TOLERANCES = {"threshold": 0.6, "margin": 0.3, "band": 0.07, "smooth": 3, "final_window": 3,
                      "initial_window": 3}


FULLY_ASYNC_STALENESS = (1, 2)  # the staleness bounds a fully-async cell is checked at


def cell_rollout(backend: str) -> str:
    """The rollout engine of this cell: its vLLM where it has one (FSDP trainer), else HF generate."""
    return "vllm" if backend == "fsdp" and vllm_engine.installed() else "hf"


def _engine(rollout: str) -> dict:
    return vllm_engine.installed() if rollout == "vllm" else {"name": "hf-generate"}


def _reference_model_config(reference: dict, work: Path) -> Path | None:
    """The reference's model config (a dict kept in the file) as the JSON file the trainer reads."""
    if "model_config" not in reference:
        return None
    path = work / "reference_model_config.json"
    path.write_text(json.dumps(reference["model_config"]), encoding="utf-8")
    return path


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to `window` steps (the first steps average what exists)."""
    out = []
    for index in range(len(values)):
        part = values[max(0, index - window + 1): index + 1]
        out.append(sum(part) / len(part))
    return out


def trainer_command(backend: str, model: str, steps: int, seed: int, metrics: Path, args: dict,
                    model_config: Path | None = None, nproc: int = NPROC) -> list[str]:
    device = os.environ.get("HARNESS_DEVICE", "cpu")
    command = torchrun.command(nproc, TRAINER_MODULES[backend], [
        "--model", model, "--steps", str(steps), "--seed", str(seed), "--device", device, "--metrics", str(metrics)])
    if model_config is not None:
        command += ["--model-config", str(model_config)]
    for key, value in args.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return command


PARALLEL_KEYS = ("ep", "cp", "pp", "tp")  # the Megatron trainer's parallel sizes, given up in this order


def visible_devices(device: str) -> int | None:
    """How many `device` accelerators the trainer's ranks can have, one each (None on cpu)."""
    if device == "cpu":
        return None
    from trainers.runtime.device import plan

    return plan(device).device_count()


def fit_ranks(nproc: int, backend: str, args: dict, max_ranks: int | None) -> tuple[int, dict, str | None]:
    """(ranks, trainer args, why fewer) for a run the reference made on `nproc` ranks, on the ranks there are:
    at most `max_ranks` ([matrix] max_ranks), and on an accelerator at most its visible devices (a one-GPU box
    has no second device for rank 1). Megatron's parallel sizes shrink to fit (expert, context, pipeline, then
    tensor parallel to 1); the data-parallel size follows."""
    device = os.environ.get("HARNESS_DEVICE", "cpu")
    limits = [(max_ranks, f"max_ranks {max_ranks}")] if max_ranks else []
    visible = visible_devices(device)
    if visible:  # None (cpu) or 0: no limit from devices; the trainer reports a missing device itself
        limits.append((visible, f"{visible} visible {device} device" + ("s" if visible > 1 else "")))
    limit, why = min(limits, default=(nproc, None))
    if limit >= nproc:
        return nproc, args, None
    args = dict(args)
    if backend == "megatron":
        for key in PARALLEL_KEYS:
            if limit % math.prod(int(args.get(k, 1)) for k in PARALLEL_KEYS) == 0:
                break
            if int(args.get(key, 1)) > 1:
                args[key] = 1
    return limit, args, why


def forked_trainer(command: list[str]) -> tuple[str, list[str], int] | None:
    """(trainer module, its argv, ranks) of a `trainer_command` that can run on ranks forked from this
    process: on CPU with Hugging Face rollout, or with vLLM on one rank (its engine then runs inside the
    rank: trainers.rollout). Accelerator runtimes, and vLLM's own engine processes, keep torchrun's."""
    nproc, module, argv = int(command[5]), command[7], command[8:]  # the layout trainer_command builds
    options = dict(zip(argv[::2], argv[1::2]))  # every trainer flag it passes takes a value
    rollout = options.get("--rollout", "hf")
    forkable = options["--device"] == "cpu" and (rollout == "hf" or (rollout == "vllm" and nproc == 1))
    from harness.checks.support.forked_ranks import fork_safe

    return (module, argv, nproc) if forkable and fork_safe() else None


def run_trainer(command: list[str], log: Path, timeout: float = RUN_TIMEOUT) -> tuple[int | None, float]:
    """Run the trainer, its output to `log`; (exit code or None on timeout, seconds)."""
    env = {**os.environ, **TRAINER_ENV}
    started = time.perf_counter()
    forked = forked_trainer(command)
    with log.open("w", encoding="utf-8") as handle:
        handle.write(" ".join(command) + "\n")
        launcher = "ranks forked from the check (as this command sets them up)" if forked else "torchrun"
        handle.write(f"[harness] {launcher}\n")
    if forked is not None:
        return _run_forked(*forked, log, timeout)
    # vLLM's engine processes are the ranks' children: stopping the job's session stops them too.
    code = torchrun.wait(torchrun.launch(command, log, env, append=True), timeout)
    return code, time.perf_counter() - started


def _run_forked(module: str, argv: list[str], nproc: int, log: Path, timeout: float) -> tuple[int | None, float]:
    """The trainer's main(argv) on `nproc` ranks forked from this process (harness.checks.support.forked_ranks): the
    same ranks, flags and numbers as under torchrun, without its launcher and per-rank imports."""
    from harness.checks.support.forked_ranks import preload, run_ranks

    main = importlib.import_module(f"{module}.__main__").main
    preload(f"{module}.train")  # the trainer's imports, shared with every rank
    outcome = run_ranks(lambda: main(argv), nproc, log, timeout, TRAINER_ENV)
    if outcome.timed_out:
        return None, outcome.seconds
    return next((code for code in outcome.exit_codes if code), 0), outcome.seconds


def evaluate(records: list[dict], reference: dict, comparable: bool = True,
             band_skip: str | None = None) -> tuple[Status, str, dict, list[Verdict]]:
    """The verdicts for a run's per-step records against a reference (pure: tests call it); with
    `band_skip` (the reference has no curve for this run's engine) the band is skipped for that reason."""
    curve = [float(r["reward_mean"]) for r in records]
    ref_curve = [float(v) for v in reference.get("curve", ())]
    final_window, initial_window = int(reference["final_window"]), int(reference["initial_window"])
    final = sum(curve[-final_window:]) / len(curve[-final_window:])
    initial = sum(curve[:initial_window]) / len(curve[:initial_window])
    gain = final - initial
    smooth = int(reference["smooth"])
    run_smooth, ref_smooth = moving_average(curve, smooth), moving_average(ref_curve, smooth)
    deviations = [abs(a - b) for a, b in zip(run_smooth, ref_smooth)]
    max_deviation = max(deviations) if deviations else float("nan")
    worst_step = deviations.index(max_deviation) if deviations else None
    metrics = {"reward_curve": curve, "reference_curve": ref_curve, "band": reference["band"],
               "smooth": smooth, "final_reward": final, "initial_reward": initial, "gain": gain,
               "max_deviation": max_deviation, "worst_step": worst_step, "steps": len(curve),
               "threshold": reference["threshold"], "margin": reference["margin"], "per_step": records}
    verdicts = [
        Verdict("threshold", Status.PASS if final > reference["threshold"] else Status.FAIL,
                f"final reward {final:.3f} vs threshold {reference['threshold']}"),
        Verdict("gain", Status.PASS if gain >= reference["margin"] else Status.FAIL,
                f"gain {gain:.3f} ({initial:.3f} -> {final:.3f}) vs margin {reference['margin']}"),
    ]
    if band_skip:
        verdicts.append(Verdict("band", Status.SKIP, band_skip))
    elif not comparable or len(curve) != len(ref_curve):
        verdicts.append(Verdict("band", Status.SKIP, "seed, steps or model config differ from the reference's"))
    else:
        inside = max_deviation <= reference["band"]
        verdicts.append(Verdict("band", Status.PASS if inside else Status.FAIL,
                                f"max deviation {max_deviation:.3f} at step {worst_step} "
                                f"(moving average of {smooth}) vs band {reference['band']}"))
    failed = [v for v in verdicts if v.status is Status.FAIL]
    status = Status.FAIL if failed else Status.PASS
    message = "; ".join(v.message for v in (failed or verdicts))
    return status, message, metrics, verdicts


def _unavailable(model: str) -> str | None:
    from trainers.models import Qwen35Unavailable, default_config

    try:
        default_config(model)
    except Qwen35Unavailable as exc:
        return str(exc).split(":")[0]
    return None


def run_with(options: CheckOptions, trainer_args: dict | None = None, reference: dict | None = None,
             staleness: tuple[int, ...] = FULLY_ASYNC_STALENESS) -> CheckResult:
    """`run` with extra trainer flags (e.g. {"lr": 0}) or another reference (tests use both)."""
    missing = _unavailable(options.model)
    if missing:
        return CheckResult(NAME, Status.SKIP, missing, metrics={"qwen35_available": False})
    if options.backend not in TRAINER_MODULES:
        return CheckResult(NAME, Status.SKIP, f"no GRPO trainer for backend {options.backend!r} yet")
    if options.mode != "fully-async":
        return _one_run(options, None, trainer_args, reference)
    return _combine([(k, _one_run(options, k, trainer_args, reference)) for k in staleness])


def _combine(runs: list[tuple[int, CheckResult]]) -> CheckResult:
    """One result for the fully-async runs: their verdicts prefixed `staleness<K>/`, the worst status."""
    verdicts, metrics, messages = [], {"mode": "fully-async"}, []
    for k, result in runs:
        verdicts += [Verdict(f"staleness{k}/{v.name}", v.status, v.message) for v in result.verdicts]
        metrics[f"staleness{k}"] = result.metrics
        messages.append(f"staleness {k}: {result.status.value}: {result.message}")
    order = (Status.TIMEOUT, Status.FAIL, Status.PASS, Status.SKIP)
    status = next((s for s in order if any(r.status is s for _, r in runs)), runs[0][1].status)
    return CheckResult(NAME, status, "; ".join(messages), metrics=metrics, verdicts=verdicts, log=runs[0][1].log)


def _one_run(options: CheckOptions, staleness: int | None, trainer_args: dict | None,
             reference: dict | None) -> CheckResult:
    """One trainer run against its reference: sync (staleness None) or fully-async at `staleness`."""
    rollout = cell_rollout(options.backend) if staleness is None else "hf"  # fully-async runs keep HF generate
    band_skip, reference_file = None, None
    if reference is None:
        reference, band_skip, path = grpo_references.choose(options.backend, options.model, staleness, rollout,
                                                            _engine(rollout))
        if reference is None:
            return CheckResult(NAME, Status.SKIP, band_skip)
        reference_file = path.name if band_skip is None else None
    steps = options.steps or int(reference["steps"])
    args = {**reference.get("trainer_args", {}), **(trainer_args or {})}
    if args.get("rollout", "hf") == "hf":  # keeps transformers' generate under test (trainers.rollout.HFRollout)
        args.setdefault("rollout_check", "generate")
    if staleness is not None:
        args.update(mode="fully-async", staleness=staleness)
    work = Path(options.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    stem = f"grpo_{options.model}" + ("" if staleness is None else f"_async{staleness}")
    metrics_file, log = work / f"{stem}_metrics.jsonl", work / f"{stem}.log"
    nproc = int(reference.get("nproc", NPROC))
    ranks, args, fewer = fit_ranks(nproc, options.backend, args, options.max_ranks)
    command = trainer_command(options.backend, options.model, steps, options.seed, metrics_file, args,
                              options.model_config or _reference_model_config(reference, work), ranks)
    code, seconds = run_trainer(command, log)
    from trainers.grpo.metrics import read_metrics

    records = read_metrics(metrics_file) if metrics_file.exists() else []
    if code is None:
        return CheckResult(NAME, Status.TIMEOUT, f"trainer ran over {RUN_TIMEOUT:.0f} s ({len(records)} steps done)",
                           metrics={"per_step": records, "wall_seconds": seconds}, log=str(log))
    stopped = next((r["stopped"] for r in records if "stopped" in r), None)  # a non-finite loss or norm
    if stopped:
        return CheckResult(NAME, Status.FAIL, f"{stopped} (trainer exited {code})",
                           metrics={"per_step": records, "wall_seconds": seconds}, log=str(log),
                           verdicts=[Verdict("finite", Status.FAIL, stopped)])
    if code != 0 or len(records) != steps:
        return CheckResult(NAME, Status.FAIL, f"trainer exited {code} after {len(records)} of {steps} steps; see log",
                           metrics={"per_step": records, "wall_seconds": seconds}, log=str(log))
    comparable = (options.seed == reference["seed"] and steps == reference["steps"] and options.model_config is None
                  and not trainer_args)
    status, message, metrics, verdicts = evaluate(records, reference, comparable, band_skip)
    if staleness is not None:
        from trainers.fully_async.driver import staleness_distribution

        extra = async_verdicts.verdicts(records, staleness)
        verdicts += extra
        failed = [v for v in extra if v.status is Status.FAIL]
        if failed:
            status, message = Status.FAIL, "; ".join([v.message for v in failed] + [message])
        else:  # the report's line shows the check's message: the importance-sampling statistics go in it
            message = f"{message}; {extra[-1].message}"
        metrics["importance_sampling"] = async_verdicts.correction_stats(records)
        metrics["staleness_distribution"] = staleness_distribution(records)
        last = records[-1]
        metrics.update({k: last.get(k) for k in ("overlap_fraction", "rollout_busy_fraction", "update_busy_fraction")})
    metrics["wall_seconds"] = round(seconds, 2)
    metrics["ranks"], metrics["reference_ranks"] = ranks, nproc
    if fewer:  # the reference's curve was made on more ranks: say so with the result
        message = f"{message}; {ranks} rank{'s' if ranks != 1 else ''} of the reference's {nproc} ({fewer})"
    metrics["engine"] = _engine(args.get("rollout", "hf"))
    metrics["reference_file"] = reference_file  # None: held to no curve (band skipped) or to a test's reference
    metrics["command"] = command[1:]
    if args.get("rollout", "hf") != "hf":  # the report shows messages: say which engine rolled out
        message = f"rollout {vllm_engine.describe(metrics['engine'])}: {message}"
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts, log=str(log))


def run(options: CheckOptions) -> CheckResult:
    return run_with(options)


# What a backend's first metrics line says about the code that ran, kept with the reference.
_BACKEND_RECORD = {"megatron": ("bridge", "variant", "gated_delta_rule", "shim_symbols")}


def made_with(command: list[str], backend: str = "fsdp", first: dict | None = None) -> dict:
    import importlib.metadata

    import tensordict
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__,
           "tensordict": tensordict.__version__, "python": platform.python_version(),
           "date": datetime.date.today().isoformat(),
           "command": "python -m harness.checks.grpo_convergence " + " ".join(_portable(command))}
    if backend == "megatron":
        out["megatron-core"] = importlib.metadata.version("megatron-core")
    out.update({key: (first or {}).get(key) for key in _BACKEND_RECORD.get(backend, ())})
    return out


def _portable(argv: list[str]) -> list[str]:
    """argv without --work-dir and its value: a machine's path has no place in the repository."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--work-dir":
            skip = True
        elif not arg.startswith("--work-dir="):
            out.append(arg)
    return out


def regenerate(model: str, backend: str, work_dir: Path, argv: list[str], staleness: int | None = None,
               rollout: str = "hf") -> Path:
    """Run the trainer with the reference's settings and rewrite the reference file. A new
    fully-async reference starts from the sync reference's settings, with the mode added; a new
    vLLM release's from another release's (grpo_references.new_reference_settings)."""
    engine = _engine(rollout)
    if engine is None:
        raise SystemExit(f"--rollout {rollout}: no vLLM is installed in this environment")
    path = reference_path(backend, model, staleness, rollout, engine)
    if path.exists():
        old = grpo_references.load(path)
    else:  # another vLLM release's settings, else the sync run's; their curves and notes are their own
        old = grpo_references.new_reference_settings(backend, model, staleness, rollout)
    if not path.exists() and rollout == "vllm":  # on the vLLM checks' model, one rank, with the vLLM rollout
        old.update(trainer_args={**old.get("trainer_args", {}), "rollout": "vllm"},
                   model_config=vllm_engine.ROLLOUT_MODEL_CONFIG, nproc=1)
    settings = {**DEFAULT_TOLERANCES, "steps": 20, "seed": 0, "trainer_args": {}, **old}
    if staleness is not None:
        settings["trainer_args"] = {**settings["trainer_args"], "mode": "fully-async", "staleness": staleness}
    stem = f"regenerate_{model}" + ("" if staleness is None else f"_async{staleness}")
    metrics_file, log = work_dir / f"{stem}.jsonl", work_dir / f"{stem}.log"
    command = trainer_command(backend, model, settings["steps"], settings["seed"], metrics_file,
                              settings["trainer_args"], _reference_model_config(settings, work_dir),
                              int(settings.get("nproc", NPROC)))
    code, _ = run_trainer(command, log, REGENERATE_TIMEOUT)
    from trainers.grpo.metrics import read_metrics

    records = read_metrics(metrics_file) if metrics_file.exists() else []
    if code != 0 or len(records) != settings["steps"]:
        raise SystemExit(f"trainer failed (exit {code}, {len(records)} steps); see {log}")
    settings["curve"] = [round(float(r["reward_mean"]), 6) for r in records]
    if staleness is not None:
        from trainers.fully_async.driver import staleness_distribution

        settings["staleness_distribution"] = staleness_distribution(records)
    settings["made_with"] = {**made_with(argv, backend, records[0]), "engine": engine}
    write_json_atomic(path, settings)
    return path


def option_problem(args) -> str | None:
    """This module's own command line, checked before anything runs or is written (one line, exit 2)."""
    from harness.results.directories import directory_problem

    if not 0 <= args.seed < 2**32:
        return f"--seed: expected a whole number from 0 to {2**32 - 1}, got {args.seed}"
    if args.steps is not None and args.steps < 1:
        return f"--steps: expected a whole number of at least 1, got {args.steps}"
    if args.max_ranks is not None and args.max_ranks < 1:
        return f"--max-ranks: expected a whole number of ranks, at least 1, got {args.max_ranks}"
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr >= 0):
        return f"--lr: expected a finite number >= 0, got {args.lr}"
    return directory_problem("--work-dir", args.work_dir)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m harness.checks.grpo_convergence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="text")
    parser.add_argument("--backend", default="fsdp", choices=sorted(TRAINER_MODULES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--model-config", type=Path)
    parser.add_argument("--mode", default="sync", choices=("sync", "fully-async"))
    parser.add_argument("--staleness", type=int, choices=FULLY_ASYNC_STALENESS,
                        help="fully-async: regenerate (or check) only this staleness bound")
    parser.add_argument("--lr", type=float,
                        help="override the trainer's learning rate (0: a trainer that cannot learn)")
    parser.add_argument("--work-dir", type=Path, default=Path("grpo-convergence"))
    parser.add_argument("--regenerate", action="store_true", help="rewrite the reference curve from a fresh run")
    parser.add_argument("--rollout", default="hf", choices=("hf", "vllm"), help="with --regenerate: which reference")
    parser.add_argument("--max-ranks", type=int, help="run on at most this many ranks (the reference's otherwise)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    problem = option_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.work_dir.mkdir(parents=True, exist_ok=True)
    bounds = (args.staleness,) if args.staleness else FULLY_ASYNC_STALENESS
    if args.regenerate:
        for k in (bounds if args.mode == "fully-async" else (None,)):
            print(f"wrote {regenerate(args.model, args.backend, args.work_dir, argv, k, args.rollout)}")
        return 0
    options = CheckOptions(model=args.model, backend=args.backend, seed=args.seed, steps=args.steps,
                           model_config=args.model_config, work_dir=args.work_dir, mode=args.mode,
                           max_ranks=args.max_ranks)
    result = run_with(options, {"lr": args.lr} if args.lr is not None else None, staleness=bounds)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"{result.status.value}: {result.message}")
        for verdict in result.verdicts:
            print(f"  {verdict.name}: {verdict.status.value}: {verdict.message}")
    return 1 if result.status.is_failure else 0


if __name__ == "__main__":
    sys.exit(main())
