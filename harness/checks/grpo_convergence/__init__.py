"""grpo-convergence: a short GRPO run on a tiny Qwen3.5 model must learn, and follow its reference.

The FSDP trainer runs with 2 ranks on CPU for the reference's number of steps and seed: the
command recorded is the torch.distributed.run one; on CPU with Hugging Face rollout the same trainer
runs on ranks forked from the check's process (launch.py), with no launcher and no
second import of torch and transformers per rank. Three verdicts (evaluation.py):
- threshold: the final reward (mean of the last `final_window` steps) exceeds `threshold`;
- gain: final minus initial reward (mean of the first `initial_window` steps) >= `margin`;
- band: the reward curve, smoothed by a moving average of `smooth` steps, stays within `band`
  of the smoothed reference curve at every step (only when seed, steps and model config match
  the reference's, otherwise `skip`).
All tolerances live in trainers/references/grpo_<backend>_<model>.json (references.py). That file is
rewritten only by `python -m harness.checks.grpo_convergence --regenerate --model text` (regeneration.py),
which records the versions and the command it was made with.

In a fully-async cell (mode axis `fully-async`) the trainer runs with `--mode fully-async` at
staleness 1 and at 2, each against its own reference (grpo_<backend>_<model>_async<K>.json,
made with `--regenerate --mode fully-async --staleness K`), with three more verdicts per run
(async_verdicts): `bounded` (every sample's engine held weights at most K versions old) and `schedule`
(the observed staleness is the configured rule), both read from a fingerprint of the weights the engine
held when it generated each batch, matched against the published versions' (a sync that loads nothing
fails both; a sample whose weights match no single version fails both), and `correction` (stale samples
were importance-weighted, with the ratio statistics). The queue's depth is shown against its capacity,
which the queue enforces itself. The measured staleness distribution, overlap and importance-sampling
statistics are in the metrics.

In a cell with a vLLM the FSDP trainer rolls out with that vLLM (`--rollout vllm`), against the
reference of that engine release, grpo_fsdp_<model>_<engine>-<version>.json (one rank, the vLLM checks'
model config: see vllm_engine), made in its environment with `--regenerate --rollout vllm`. A release
without one is held to threshold and gain; its band is skipped (see references.py). The result names
the engine and the reference file.

In a row that installs verl, `verl:grpo-math` (verl_math) first compares verl's own GRPO advantage, policy loss and
rollout correction with this project's on the same batch, and the result's message says whether the convergence
verdict speaks for verl: in the typical regime only where they are equal; never for verl's dual clip, its KL clamp
or GSPO, which this project's trainer does not have.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from harness.checks import CheckOptions
from harness.checks.grpo_convergence import evaluation, launch, regeneration, verl_math
from harness.checks.grpo_convergence import references as grpo_references
from harness.checks.support import verl, vllm_engine
from harness.results.records import CheckResult, Status, Verdict

NAME = evaluation.NAME
FULLY_ASYNC_STALENESS = (1, 2)  # the staleness bounds a fully-async cell is checked at


def _unavailable(model: str) -> str | None:
    from trainers.models import Qwen35Unavailable, default_config

    try:
        default_config(model)
    except Qwen35Unavailable as exc:
        return str(exc).split(":")[0]
    return None


def run(options: CheckOptions) -> CheckResult:
    if not verl.installed():
        return run_with(options)
    result = run_with(options)
    # After the run, not before: where this check did not fork from the verl tier (checks.VERL_PRELOAD; imported
    # there under the cell's FORK_SAFETY settings, which keep pyarrow's thread from starting), importing verl here
    # first could start a thread that keeps the trainer's ranks from being forked (each torchrun rank then imports
    # the stack again).
    return verl_math.attach(result, verl_math.verdict())


def run_with(options: CheckOptions, trainer_args: dict | None = None, reference: dict | None = None,
             staleness: tuple[int, ...] = FULLY_ASYNC_STALENESS) -> CheckResult:
    """`run` with extra trainer flags (e.g. {"lr": 0}) or another reference (tests use both)."""
    missing = _unavailable(options.model)
    if missing:
        return CheckResult(NAME, Status.SKIP, missing, metrics={"qwen35_available": False})
    if options.backend not in launch.TRAINER_MODULES:
        return CheckResult(NAME, Status.SKIP, f"no GRPO trainer for backend {options.backend!r} yet")
    if options.mode != "fully-async":
        return _one_run(options, None, trainer_args, reference)
    return evaluation.combine([(k, _one_run(options, k, trainer_args, reference)) for k in staleness])


def _one_run(options: CheckOptions, staleness: int | None, trainer_args: dict | None,
             reference: dict | None) -> CheckResult:
    """One trainer run against its reference: sync (staleness None) or fully-async at `staleness`."""
    rollout = launch.cell_rollout(options.backend) if staleness is None else "hf"  # fully-async keeps HF generate
    band_skip, reference_file = None, None
    if reference is None:
        reference, band_skip, path = grpo_references.choose(options.backend, options.model, staleness, rollout,
                                                            launch.engine(rollout))
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
    nproc = int(reference.get("nproc", launch.NPROC))
    ranks, args, fewer = launch.fit_ranks(nproc, options.backend, args, options.max_ranks)
    command = launch.trainer_command(options.backend, options.model, steps, options.seed, metrics_file, args,
                                     options.model_config or launch.model_config_file(reference, work), ranks)
    code, seconds = launch.run_trainer(command, log)
    from trainers.grpo.metrics import read_metrics

    records = read_metrics(metrics_file) if metrics_file.exists() else []
    if code is None:
        return CheckResult(NAME, Status.TIMEOUT,
                           f"trainer ran over {launch.RUN_TIMEOUT:.0f} s ({len(records)} steps done)",
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
    status, message, metrics, verdicts = evaluation.evaluate(records, reference, comparable, band_skip)
    if staleness is not None:
        status, message = evaluation.add_fully_async(records, staleness, status, message, metrics, verdicts)
    metrics["wall_seconds"] = round(seconds, 2)
    metrics["ranks"], metrics["reference_ranks"] = ranks, nproc
    if fewer:  # the reference's curve was made on more ranks: say so with the result
        message = f"{message}; {ranks} rank{'s' if ranks != 1 else ''} of the reference's {nproc} ({fewer})"
    metrics["engine"] = launch.engine(args.get("rollout", "hf"))
    metrics["reference_file"] = reference_file  # None: held to no curve (band skipped) or to a test's reference
    metrics["command"] = command[1:]
    if args.get("rollout", "hf") != "hf":  # the report shows messages: say which engine rolled out
        message = f"rollout {vllm_engine.describe(metrics['engine'])}: {message}"
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts, log=str(log))


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
    parser.add_argument("--backend", default="fsdp", choices=sorted(launch.TRAINER_MODULES))
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
            print(f"wrote {regeneration.regenerate(args.model, args.backend, args.work_dir, argv, k, args.rollout)}")
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
