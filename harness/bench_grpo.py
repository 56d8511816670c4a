"""Benchmark: GRPO time to the reward threshold on the toy task, steps per second, peak memory.

Runs the FSDP trainer as one process on ONE CPU thread with the grpo-convergence reference's
settings, and writes the figures to --out (JSON). The side-by-side TRL GRPOTrainer run of the
issue is NOT implemented yet: the output says so under "trl" rather than inventing a figure.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from harness.checks.grpo_convergence import reference_path
from harness.results import write_json_atomic


def run_ours(work: Path, steps: int, reference: dict) -> dict:
    metrics = work / "bench_fsdp.jsonl"
    command = [sys.executable, "-m", "trainers.fsdp", "--device", "cpu", "--steps", str(steps),
               "--seed", str(reference["seed"]), "--metrics", str(metrics)]
    for key, value in reference["trainer_args"].items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    from trainers.metrics import read_metrics

    records = read_metrics(metrics)
    step_seconds = [r["rollout_seconds"] + r["update_seconds"] + r["sync_seconds"] for r in records]
    threshold, window = reference["threshold"], reference["final_window"]
    reached = None
    for index in range(window - 1, len(records)):
        if sum(r["reward_mean"] for r in records[index - window + 1: index + 1]) / window > threshold:
            reached = index
            break
    return {
        "trainer": "trainers.fsdp (1 process, 1 thread)",
        "steps": len(records),
        "steps_per_second": len(records) / sum(step_seconds),
        "wall_seconds": wall,
        "startup_seconds": wall - sum(step_seconds),
        "threshold": threshold,
        "threshold_step": reached,
        "seconds_to_threshold": sum(step_seconds[: reached + 1]) if reached is not None else None,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "reward_curve": [r["reward_mean"] for r in records],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.bench_grpo", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model", default="text")
    args = parser.parse_args(argv)
    reference = json.loads(reference_path("fsdp", args.model).read_text(encoding="utf-8"))
    work = args.out.parent
    work.mkdir(parents=True, exist_ok=True)
    figures = {"ours": run_ours(work, args.steps, reference),
               "trl": {"measured": False, "reason": "side-by-side TRL GRPOTrainer run not implemented yet"},
               "load_average": os.getloadavg()}
    write_json_atomic(args.out, figures)
    print(json.dumps({k: v for k, v in figures["ours"].items() if k != "reward_curve"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
