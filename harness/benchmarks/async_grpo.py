"""Benchmark: GRPO wall time to the reward threshold, synchronous against fully-async.

    python -m harness.benchmarks.async_grpo --out FILE [--staleness 1 2] [--seeds 0] [--steps 25]
    nox -s bench -- --async

Same tiny Qwen3.5 text model, task, settings and seed on every side (the convergence reference's,
trainers/references/grpo_fsdp_text.json); each side is `trainers.fsdp`'s trainer in a process of
its own, one torch thread per Python thread (the fully-async side has two: the trainer's and its
rollout producer's). Sides run in alternating order from seed to seed. Time to threshold is
measured by harness.benchmarks.grpo's StepClock, the same clock as the TRL comparison.

What to expect: fully-async hides rollout behind the update only as far as both can run at once.
On CPU the ops release the GIL but the Python around them (generate's loop, the optimizer step,
FSDP's hooks) does not, and on a 2-core machine shared with other work there is often no idle
core to run on; stale samples also learn a little less per step. The overlap each run achieved
(fraction of wall time with rollout and update both busy) is recorded beside the time, with the
load average, so the figure can be read for what it is.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from harness.benchmarks.grpo import THREAD_ENV, StepClock, run_capped, summarise
from harness.checks.grpo_convergence.references import reference_path
from harness.results.records import write_json_atomic

from . import provenance

OVERLAP_KEYS = ("overlap_fraction", "rollout_busy_fraction", "update_busy_fraction")


def train_side(settings: dict, clock_file: Path) -> None:
    """One side, in this process: the trainer step by step (sync) or through the fully-async driver."""
    import torch
    import torch.distributed as dist

    from trainers.fsdp.config import TrainConfig
    from trainers.fsdp.train import GRPOTrainer
    from trainers.fully_async import driver

    trainer = GRPOTrainer(TrainConfig(device="cpu", model="text", **settings))
    clock = StepClock(clock_file)

    def tick(record: dict) -> None:
        clock.record(record["step"], record["reward_mean"], torch.get_num_threads())

    if trainer.config.mode == "fully-async":
        driver.train(trainer, on_record=tick)
    else:
        for step in range(trainer.config.steps):
            tick(trainer.step(step))
    trainer.close()
    dist.destroy_process_group()


def run_side(name: str, settings: dict, work: Path, reference: dict, cap: float) -> dict:
    stem = work / f"{name}-seed{settings['seed']}"
    settings_file, clock_file, metrics, log = (Path(f"{stem}{s}") for s in (".json", ".clock.jsonl",
                                                                          ".metrics.jsonl", ".log"))
    write_json_atomic(settings_file, {**settings, "metrics": str(metrics)})
    run = run_capped([sys.executable, "-m", "harness.benchmarks.async_grpo", "--worker",
                      str(settings_file), str(clock_file)], {**os.environ, **THREAD_ENV}, log, cap)
    steps = [json.loads(line) for line in clock_file.read_text().splitlines() if line.strip()] \
        if clock_file.exists() else []
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] \
        if metrics.exists() else []
    figures = {"side": name, "seed": settings["seed"], **summarise(steps, run, reference, log)}
    if records and "overlap_fraction" in records[-1]:
        from trainers.fully_async.driver import staleness_distribution

        figures.update({k: records[-1][k] for k in OVERLAP_KEYS},
                       staleness_distribution=staleness_distribution(records))
    return figures


def benchmark(args: argparse.Namespace) -> dict:
    reference = json.loads(reference_path("fsdp", "text").read_text(encoding="utf-8"))
    work = args.out.resolve().parent
    work.mkdir(parents=True, exist_ok=True)
    sides = {"sync": {}, **{f"fully-async-{k}": {"mode": "fully-async", "staleness": k} for k in args.staleness}}
    names = list(sides)
    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for index, seed in enumerate(args.seeds):
        for name in names if index % 2 == 0 else names[::-1]:
            settings = {**reference["trainer_args"], **sides[name], "seed": seed, "steps": args.steps}
            figures = run_side(name, settings, work, reference, args.cap)
            runs[name].append(figures)
            print(f"{name} seed {seed}: threshold step {figures['threshold_step']}, "
                  f"{figures['seconds_to_threshold']} s, overlap {figures.get('overlap_fraction')}", flush=True)
    return {"what": "GRPO wall time to the reward threshold: sync vs fully-async (trainers.fsdp, 1 process)",
            **provenance.stamp(),
            "settings": {**reference["trainer_args"], "steps": args.steps, "seeds": args.seeds,
                         "threshold": reference["threshold"], "window": reference["final_window"]},
            "load_average": {"before": list(load_before), "after": list(os.getloadavg()), "cores": os.cpu_count()},
            "summary": summarise_sides(runs), **runs}


def summarise_sides(runs: dict[str, list[dict]]) -> dict:
    """Per side: mean time to threshold over seeds (None unless every seed reached it), mean overlap;
    and each fully-async side's speedup over sync (above 1: fully-async reached it sooner)."""
    out: dict = {}
    for name, figures in runs.items():
        reached = bool(figures) and all(f["reached"] for f in figures)
        seconds = sum(f["seconds_to_threshold"] for f in figures) / len(figures) if reached else None
        overlaps = [f["overlap_fraction"] for f in figures if f.get("overlap_fraction") is not None]
        out[name] = {"seconds_to_threshold": seconds, "reached_every_seed": reached,
                     "overlap_fraction": sum(overlaps) / len(overlaps) if overlaps else None}
    sync = out.get("sync", {}).get("seconds_to_threshold")
    for name, side in out.items():
        if name != "sync":
            side["speedup_over_sync"] = sync / side["seconds_to_threshold"] if sync and side["seconds_to_threshold"] \
                else None
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:  # internal: one side's process, `--worker SETTINGS CLOCK`
        train_side(json.loads(Path(argv[1]).read_text(encoding="utf-8")), Path(argv[2]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks.async_grpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--staleness", type=int, nargs="+", default=[1])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--cap", type=float, default=900.0, help="seconds per side and seed before it is killed")
    args = parser.parse_args(argv)
    if args.out is None:
        parser.error("--out is required")
    figures = benchmark(args)
    write_json_atomic(args.out, figures)
    print(json.dumps({k: figures[k] for k in ("summary", "load_average")}, indent=1))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # a worker that tore down a process group can abort at interpreter exit otherwise
