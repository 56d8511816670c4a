"""A grpo-convergence reference rewritten from a fresh trainer run (`--regenerate`), with how it was made.

The file is rewritten only here, on request: its settings (tolerances, trainer flags, model config) are kept,
its curve (and a fully-async run's staleness distribution) replaced, and `made_with` records the versions, the
engine and the command. A new file starts from the settings references.new_reference_settings names.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import platform
from pathlib import Path

from harness.checks.grpo_convergence import launch
from harness.checks.grpo_convergence import references as grpo_references
from harness.checks.support import vllm_engine
from harness.results.records import write_json_atomic

REGENERATE_TIMEOUT = 3600.0  # a deliberate one-off; a vLLM engine on a loaded machine can take minutes to start
# Used only when a reference file is first created; afterwards the file is the authority.
DEFAULT_TOLERANCES = {"threshold": 0.6, "margin": 0.3, "band": 0.07, "smooth": 3, "final_window": 3,
                      "initial_window": 3}
# What a backend's first metrics line says about the code that ran, kept with the reference.
_BACKEND_RECORD = {"megatron": ("bridge", "variant", "gated_delta_rule", "shim_symbols")}


def made_with(command: list[str], backend: str = "fsdp", first: dict | None = None) -> dict:
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
    used = launch.engine(rollout)
    if used is None:
        raise SystemExit(f"--rollout {rollout}: no vLLM is installed in this environment")
    path = grpo_references.reference_path(backend, model, staleness, rollout, used)
    if path.exists():
        old = grpo_references.load(path)
    else:  # another vLLM release's settings, else the sync run's; their curves and notes are their own
        old = grpo_references.new_reference_settings(backend, model, staleness, rollout)
    if not path.exists() and rollout == "vllm":  # on the vLLM checks' model, one rank, with the vLLM rollout
        old.update(trainer_args={**old.get("trainer_args", {}), "rollout": "vllm"},
                   model_config=vllm_engine.ROLLOUT_MODEL_CONFIG, nproc=1)
    settings = {**DEFAULT_TOLERANCES, "steps": 12, "seed": 0, "trainer_args": {}, **old}
    if staleness is not None:
        settings["trainer_args"] = {**settings["trainer_args"], "mode": "fully-async", "staleness": staleness}
    stem = f"regenerate_{model}" + ("" if staleness is None else f"_async{staleness}")
    metrics_file, log = work_dir / f"{stem}.jsonl", work_dir / f"{stem}.log"
    command = launch.trainer_command(backend, model, settings["steps"], settings["seed"], metrics_file,
                                     settings["trainer_args"], launch.model_config_file(settings, work_dir),
                                     int(settings.get("nproc", launch.NPROC)))
    code, _ = launch.run_trainer(command, log, REGENERATE_TIMEOUT)
    from trainers.grpo.metrics import read_metrics

    records = read_metrics(metrics_file) if metrics_file.exists() else []
    if code != 0 or len(records) != settings["steps"]:
        raise SystemExit(f"trainer failed (exit {code}, {len(records)} steps); see {log}")
    settings["curve"] = [round(float(r["reward_mean"]), 6) for r in records]
    if staleness is not None:
        from trainers.fully_async.driver import staleness_distribution

        settings["staleness_distribution"] = staleness_distribution(records)
    settings["made_with"] = {**made_with(argv, backend, records[0]), "engine": used}
    write_json_atomic(path, settings)
    return path
