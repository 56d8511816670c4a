"""A verl example script run with every external command a recording stub, and its launch read as a launch plan.

verl's Qwen3.5 scripts are bash, not data: `${VAR:-default}` knobs, arrays of Hydra overrides, `case "${DEVICE}"`
blocks, arithmetic. So each one is run, by this machine's bash, in an empty temporary folder with a cleared
environment: PATH names only an empty folder, and bash's `command_not_found_handle` (handed to the script's shell
through the environment) records each command's arguments and does nothing else, so every program the script calls
(python3, ray, pip, nvidia-smi, date, mkdir, tee, ...) is a recording stub. A script that names a program by an
absolute path is not run. DEVICE is set (`gpu`; `npu` for the Ascend scripts), so no device probe is needed, and
the run has a timeout. The launch is the last recorded call that runs a verl module (`-m verl.<module>`); its Hydra
overrides (`key=value`, `+key=value`) map onto the plan format (FIELD_MAP, plan_format.py). What a script does not
set is never guessed: the device memory comes from DEVICE_MEMORY, each entry with its source.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT = 30.0
# Bash runs it for any command it cannot find on PATH: it records "count\0arg\0arg\0..." and reads its input to
# the end as a program at the end of a pipe would (`... | tee log`), with the script's tracing (set -x) off.
HANDLER = ('() { { set +x; } 2>/dev/null; printf "%s\\0" "$#" "$@" >> "$VERL_STUB_LOG"; '
           'while read -r _; do :; done; return 0; }')
ABSOLUTE_PROGRAM = re.compile(r"(?:^|[\s;&|(`]|\$\()(?:/usr)?/s?bin/(?!env\b)[\w.-]+", re.MULTILINE)
OVERRIDE = re.compile(r"\+{0,2}([A-Za-z_][\w.-]*)=(.*)", re.DOTALL)
MODEL_NAME = re.compile(r"[A-Za-z0-9][\w.-]{0,100}")
# Device memory in GiB, with where the number comes from: verl's scripts state no memory as a setting.
DEVICE_MEMORY = {
    "cuda": (80, "GPUs of 80 GB: the hardware the headers of verl's run_qwen3_5_35b_megatron.sh ('8 GPUs (80GB each, "
                 "e.g. 1x8 H100/H200)') and sft/gsm8k/run_qwen3_5_397b_a17b_megatron.sh name"),
    "npu": (64, "an Ascend A3 die of 64 GB: run_qwen3_5_35b_megatron.sh's header ('8 NPUs (2*64GB each, e.g. 1x8 "
                "A3)'); the scripts' NPU branches count 16 dies a node"),
}
SCRIPT_MEMORY = {  # scripts whose header names other hardware
    "run_qwen3_5_122b_a10b_megatron.sh": (96, "its header: '32 GPUs (96GB each, e.g. 4x8 H20)'"),
}
# plan field <- the overrides that set it, first found wins
FIELD_MAP = {
    ("cluster", "nodes"): ("trainer.nnodes",),
    ("cluster", "devices_per_node"): ("trainer.n_gpus_per_node",),
    ("parallel", "tp"): ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size",),
    ("parallel", "pp"): ("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",),
    ("parallel", "cp"): ("actor_rollout_ref.actor.megatron.context_parallel_size",),
    ("parallel", "ep"): ("actor_rollout_ref.actor.megatron.expert_model_parallel_size",),
    ("parallel", "etp"): ("actor_rollout_ref.actor.megatron.expert_tensor_parallel_size",),
    ("batch", "micro_batch"): ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",),
    ("batch", "max_prompt_length"): ("data.max_prompt_length",),
    ("batch", "max_response_length"): ("data.max_response_length",),
    ("batch", "remove_padding"): ("actor_rollout_ref.actor.megatron.use_remove_padding",
                                  "actor_rollout_ref.model.use_remove_padding"),
    ("batch", "dynamic_bsz"): ("actor_rollout_ref.actor.use_dynamic_bsz",),
    ("memory", "param_offload"): ("actor_rollout_ref.actor.fsdp_config.param_offload",
                                  "actor_rollout_ref.actor.megatron.param_offload"),
    ("memory", "optimizer_offload"): ("actor_rollout_ref.actor.fsdp_config.optimizer_offload",
                                      "actor_rollout_ref.actor.megatron.optimizer_offload"),
    ("memory", "grad_offload"): ("actor_rollout_ref.actor.megatron.grad_offload",),
    ("memory", "recompute"): ("actor_rollout_ref.model.enable_gradient_checkpointing",
                              "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity"),
    ("rollout", "engine"): ("actor_rollout_ref.rollout.name",),
    ("rollout", "tp"): ("actor_rollout_ref.rollout.tensor_model_parallel_size",),
}
REQUIRED = {("cluster", "nodes"), ("cluster", "devices_per_node"), ("batch", "micro_batch"),
            ("batch", "max_prompt_length"), ("batch", "remove_padding"), ("batch", "dynamic_bsz")}


@dataclass
class Launch:
    """A script's last call of a verl module: the module, its Hydra overrides in order, its config selection."""

    module: str
    overrides: list[str]
    config_name: str | None = None
    config_path: str | None = None
    settings: dict[str, str] = field(default_factory=dict)


class NotRun(Exception):
    """The script was not run, or reached no launch of verl; the message says why."""


def device_of(path: str) -> str:
    """The DEVICE a script is run with: the Ascend scripts' own, else the GPU branch."""
    return "npu" if "/ascend" in f"/{path}" else "gpu"


def record(text: str, device: str, timeout: float = TIMEOUT) -> list[list[str]]:
    """Every external command `text` (a bash script) runs, as argv lists, run under the stubs."""
    if ABSOLUTE_PROGRAM.search(text):
        raise NotRun(f"it names a program by an absolute path ({ABSOLUTE_PROGRAM.search(text).group().strip()}): "
                     "not run, as that program would not be a stub")
    with tempfile.TemporaryDirectory(prefix="verl-script-") as folder:
        stubs, work, log = Path(folder, "stubs"), Path(folder, "work"), Path(folder, "calls")
        stubs.mkdir()
        work.mkdir()
        script = Path(folder, "script.sh")
        script.write_text(text, encoding="utf-8")
        env = {"PATH": str(stubs), "HOME": str(work), "PWD": str(work), "LC_ALL": "C", "DEVICE": device,
               "VERL_STUB_LOG": str(log), "BASH_FUNC_command_not_found_handle%%": HANDLER}
        bash = shutil.which("bash") or "bash"  # this machine's bash, found before the script's PATH applies
        process = subprocess.Popen([bash, str(script)], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise NotRun(f"it ran over {timeout:.0f} s under the stubs") from None
        calls = parse_log(log.read_bytes() if log.exists() else b"")
    if process.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise NotRun(f"bash exited {process.returncode} under the stubs: {tail[0][:200]}")
    return calls


def parse_log(data: bytes) -> list[list[str]]:
    fields = data.decode("utf-8", "replace").split("\0")
    calls, at = [], 0
    while at < len(fields) - 1:
        count = int(fields[at])
        calls.append(fields[at + 1:at + 1 + count])
        at += 1 + count
    return calls


def launch(calls: list[list[str]]) -> Launch:
    """The last call that runs a verl module (python -m verl.X, torchrun ... -m verl.X)."""
    for argv in reversed(calls):
        modules = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-m" and argv[i + 1].startswith("verl.")]
        if not modules:
            continue
        found = Launch(modules[0], [])
        for arg in argv[argv.index(modules[0]) + 1:]:
            option, _, value = arg.partition("=")
            if option in ("--config-name", "--config-path"):
                setattr(found, option[2:].replace("-", "_"), value)
            elif match := OVERRIDE.fullmatch(arg):
                found.overrides.append(arg)
                found.settings[match.group(1)] = match.group(2)
        return found
    raise NotRun(f"no launch of a verl module among its {len(calls)} commands")


def _value(text: str) -> bool | int | str:
    lowered = text.strip().strip("'\"").lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("full", "selective"):  # megatron's recompute_granularity: recompute is on
        return True
    return int(lowered) if re.fullmatch(r"\d+", lowered) else text


def derive(path: str, found: Launch, device: str) -> tuple[dict[str, dict], list[str]]:
    """(the plan's sections, what the script does not say): what a plan file needs, from the script's launch."""
    if found.module != "verl.trainer.main_ppo":
        return {}, [f"it launches {found.module}, whose settings are not read as a plan (verl.trainer.main_ppo's are)"]
    settings, missing = found.settings, []
    engine = settings.get("model_engine", "")
    megatron = engine == "megatron" or any(k.startswith("actor_rollout_ref.actor.megatron.") for k in settings)
    backend = "megatron" if megatron else "fsdp" if engine in ("", "fsdp", "fsdp2") else ""
    if not backend:
        missing.append(f"plan.backend: model_engine={engine} has no backend in this project")
    model = Path(settings.get("actor_rollout_ref.model.path", "").strip("'\"").rstrip("/")).name
    name = Path(path).name
    gib, source = SCRIPT_MEMORY.get(name) or DEVICE_MEMORY[{"gpu": "cuda"}.get(device, device)]
    plan = {"plan": {"name": f"verl {name} ({device})", "model": model, "backend": backend or "fsdp",
                     "source": f"verl's {path}; memory: {source}"},
            "cluster": {"device": {"gpu": "cuda"}.get(device, device), "memory_gib": gib}}
    for (section, key), keys in FIELD_MAP.items():
        raw = next((settings[k] for k in keys if k in settings), None)
        if raw is None:
            if (section, key) in REQUIRED:
                missing.append(f"{section}.{key}: the script sets none of {', '.join(keys)}")
            continue
        value = _value(raw)
        if isinstance(value, str) and (section, key) not in (("rollout", "engine"),):
            missing.append(f"{section}.{key}: {keys[0]}={raw!r} is not a number or a boolean")
            continue
        plan.setdefault(section, {})[key] = value
    if "engine" in plan.get("rollout", {}):
        plan["rollout"].setdefault("tp", 1)
    if not MODEL_NAME.fullmatch(model):  # it names a file plans/models/<model>.json
        missing.append(f"plan.model: actor_rollout_ref.model.path ends in {model!r}, not a model name")
    return plan, missing


def plan_toml(plan: dict[str, dict]) -> str:
    """The plan as TOML: every string JSON-quoted (a valid TOML basic string), the keys this module's own."""
    lines = []
    for section, fields in plan.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {str(value).lower() if isinstance(value, bool) else json.dumps(value)}"
                  for key, value in fields.items()]
        lines.append("")
    return "\n".join(lines)
