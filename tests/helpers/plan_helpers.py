"""Write launch-plan files for tests: the seed 004 plan (122B, Megatron) with fields overridden."""
from __future__ import annotations

from pathlib import Path

BASE = {
    "plan": {"name": "test plan", "model": "Qwen3.5-122B-A10B", "backend": "megatron"},
    "cluster": {"nodes": 4, "devices_per_node": 8, "device": "cuda", "memory_gib": 96},
    "parallel": {"tp": 2, "pp": 2, "cp": 1, "ep": 8, "etp": 1},
    "batch": {"micro_batch": 1, "max_prompt_length": 3240, "max_response_length": 4096,
              "remove_padding": False, "dynamic_bsz": False},
    "memory": {"param_offload": True, "grad_offload": True, "optimizer_offload": True, "recompute": True},
    "rollout": {"engine": "vllm", "tp": 8},
}


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def write_plan(directory: Path, name: str = "plan.toml", drop: tuple[str, ...] = (), **changes) -> Path:
    """`changes` are "section__key": value (a value of None removes the key); `drop` removes sections."""
    data = {section: dict(table) for section, table in BASE.items() if section not in drop}
    for key, value in changes.items():
        section, field = key.split("__")
        data.setdefault(section, {})
        if value is None:
            data[section].pop(field, None)
        else:
            data[section][field] = value
    text = "".join(f"[{section}]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in table.items()) + "\n"
                   for section, table in data.items())
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path

ROOT_PLANS = Path(__file__).resolve().parents[2] / "plans"
