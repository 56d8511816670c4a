"""How grpo-convergence starts the trainer: its rollout engine, its command, the ranks it gets, the launcher.

The command is always the torch.distributed.run one (the result records it). On CPU with Hugging Face
rollout, or with vLLM on one rank, the same trainer runs on ranks forked from the check's process
(harness.checks.support.ranks), with no launcher and no second import of torch and transformers per rank;
accelerator runtimes and vLLM's own engine processes keep torchrun.
"""
from __future__ import annotations

import importlib
import math
import os
import time
from pathlib import Path

from harness.checks.support import ranks, vllm_engine
from harness.files import write_json_atomic

TRAINER_MODULES = {"fsdp": "trainers.fsdp", "megatron": "trainers.megatron"}  # backend -> module, same flags
NPROC = 2
RUN_TIMEOUT = 800.0  # seconds; below the registry's 900 s for this check
TRAINER_ENV = vllm_engine.TRAINER_ENV  # what a colocated engine needs (one thread per process, a small CPU KV cache)
PARALLEL_KEYS = ("ep", "cp", "pp", "tp")  # the Megatron trainer's parallel sizes, given up in this order


def cell_rollout(backend: str) -> str:
    """The rollout engine of this cell: its vLLM where it has one (FSDP trainer), else HF generate."""
    return "vllm" if backend == "fsdp" and vllm_engine.installed() else "hf"


def engine(rollout: str) -> dict | None:
    """The engine a run rolls out with, as results and references name it (None: no vLLM installed)."""
    return vllm_engine.installed() if rollout == "vllm" else {"name": "hf-generate"}


def model_config_file(reference: dict, work: Path) -> Path | None:
    """The reference's model config (a dict kept in the file) as the JSON file the trainer reads."""
    if "model_config" not in reference:
        return None
    path = work / "reference_model_config.json"
    write_json_atomic(path, reference["model_config"])
    return path


def trainer_command(backend: str, model: str, steps: int, seed: int, metrics: Path, args: dict,
                    model_config: Path | None = None, nproc: int = NPROC) -> list[str]:
    device = os.environ.get("HARNESS_DEVICE", "cpu")
    command = ranks.torchrun_command(nproc, TRAINER_MODULES[backend], [
        "--model", model, "--steps", str(steps), "--seed", str(seed), "--device", device, "--metrics", str(metrics)])
    if model_config is not None:
        command += ["--model-config", str(model_config)]
    for key, value in args.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    return command


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
    rank: trainers.rollout). Accelerator runtimes, and vLLM's own engine processes, keep torchrun's. The
    trainer's imports are made here first (`ranks.preload_trainer`), then whether forking is safe is asked."""
    nproc, module, argv = int(command[5]), command[7], command[8:]  # the layout trainer_command builds
    options = dict(zip(argv[::2], argv[1::2]))  # every trainer flag it passes takes a value
    rollout = options.get("--rollout", "hf")
    forkable = options["--device"] == "cpu" and (rollout == "hf" or (rollout == "vllm" and nproc == 1))
    if not forkable:
        return None
    ranks.preload_trainer(module)
    return (module, argv, nproc) if ranks.fork_safe() else None


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
    code = ranks.wait_torchrun(ranks.start_torchrun(command, log, env, append=True), timeout)
    return code, time.perf_counter() - started


def _run_forked(module: str, argv: list[str], nproc: int, log: Path, timeout: float) -> tuple[int | None, float]:
    """The trainer's main(argv) on `nproc` ranks forked from this process (harness.checks.support.ranks): the
    same ranks, flags and numbers as under torchrun, without its launcher and per-rank imports."""
    main = importlib.import_module(f"{module}.__main__").main
    outcome = ranks.run_ranks(lambda: main(argv), nproc, log, timeout, TRAINER_ENV)
    if outcome.timed_out:
        return None, outcome.seconds
    return next((code for code in outcome.exit_codes if code), 0), outcome.seconds
