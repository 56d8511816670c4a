"""The launch-plan format: a small TOML file, read into a frozen `Plan`; models as JSON data.

```toml
[plan]
name = "qwen3.5-122b-grpo"          # free text, shown in verdicts
model = "Qwen3.5-122B-A10B"         # a file plans/models/<model>.json
backend = "megatron"                # fsdp | megatron
source = "seed 004: verl #5874 ..." # where the numbers come from (optional)

[cluster]
nodes = 4
devices_per_node = 8                # world size = nodes x devices_per_node
device = "cuda"                     # cuda | npu | cpu
memory_gib = 96                     # one device's memory

[parallel]                          # all optional, default 1 (FSDP plans leave them out)
tp = 2
pp = 2
cp = 1
ep = 8
etp = 1
first_stage_layers = 11             # optional: megatron's uneven first / last pipeline stage
last_stage_layers = 11

[batch]
micro_batch = 1                     # sequences per device per forward
max_prompt_length = 3240
max_response_length = 4096
remove_padding = false              # packed (THD) sequences
dynamic_bsz = false

[memory]                            # all optional, default false
param_offload = true
grad_offload = true
optimizer_offload = true
recompute = true                    # full activation recompute

[rollout]                           # optional (an SFT plan has none)
engine = "vllm"                     # vllm | none (the default)
tp = 8
nodes = 8                           # optional: a separate rollout pool (fully async); default colocated

[expect]                            # optional: the plan, as published, is known not to start
starts = false                      # default true
reason = "94 layers do not split over pp = 8 ..."   # required when starts = false
link = "https://github.com/..."     # optional
```

The launch-plans check fails when a plan's verdict differs from `expect.starts`: a plan that stops
starting on a stack, and a declared failure that no longer happens (stale), both show.

Every problem is an `InputError` naming the file and the field: one line, exit status 2.
"""
from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError

MODELS_DIR = Path(__file__).resolve().parents[2] / "plans" / "models"
BACKENDS = ("fsdp", "megatron")
DEVICES = ("cuda", "npu", "cpu")
ENGINES = ("none", "vllm")  # the rollout engines whose start-up rules are known (rules.rollout_rules)

_INT_FIELDS = {
    "cluster": {"nodes": None, "devices_per_node": None},
    "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "first_stage_layers": 0, "last_stage_layers": 0},
    "batch": {"micro_batch": None, "max_prompt_length": None, "max_response_length": None},
    "rollout": {"tp": 1, "nodes": 0},
}
_BOOL_FIELDS = {
    "batch": {"remove_padding": None, "dynamic_bsz": None},
    "memory": {"param_offload": False, "grad_offload": False, "optimizer_offload": False, "recompute": False},
    "expect": {"starts": True},
}
_STR_FIELDS = {"plan": {"name": None, "model": None, "backend": None, "source": ""},
               "cluster": {"device": None}, "rollout": {"engine": "none"},
               "expect": {"reason": "", "link": ""}}
_FLOAT_FIELDS = {"cluster": {"memory_gib": None}}
# 0 means "not set" for these (and an SFT plan has no response); keyed by section too: cluster.nodes = 0 is no world
_OPTIONAL_ZERO = {"parallel.first_stage_layers", "parallel.last_stage_layers", "rollout.nodes",
                  "batch.max_response_length"}


@dataclass(frozen=True)
class ModelSpec:
    """A published model config: the Hugging Face text config and where its numbers come from."""

    name: str
    hf_config: dict[str, Any]
    source: str

    def get(self, key: str, default: Any = None) -> Any:
        return self.hf_config.get(key, default)

    @property
    def layer_types(self) -> list[str]:
        return list(self.get("layer_types") or ["full_attention"] * self.get("num_hidden_layers"))

    @property
    def has_gdn(self) -> bool:
        return "linear_attention" in self.layer_types

    @property
    def experts(self) -> int:
        return int(self.get("num_experts") or 0)


@dataclass(frozen=True)
class Plan:
    path: Path
    name: str
    model: ModelSpec
    backend: str
    source: str
    nodes: int
    devices_per_node: int
    device: str
    memory_gib: float
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    first_stage_layers: int
    last_stage_layers: int
    micro_batch: int
    max_prompt_length: int
    max_response_length: int
    remove_padding: bool
    dynamic_bsz: bool
    param_offload: bool
    grad_offload: bool
    optimizer_offload: bool
    recompute: bool
    rollout_engine: str
    rollout_tp: int
    rollout_nodes: int
    expect_starts: bool = True
    expect_reason: str = ""
    expect_link: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def rollout_world_size(self) -> int:
        """Devices the rollout engine runs on: its own pool, or the training devices (colocated)."""
        return (self.rollout_nodes or self.nodes) * self.devices_per_node

    @property
    def sequence_length(self) -> int:
        return self.max_prompt_length + self.max_response_length


def load_model(name: str, where: str, models_dir: Path = MODELS_DIR) -> ModelSpec:
    """The model `name` from `models_dir/<name>.json`; `where` names the plan field for errors."""
    path = models_dir / f"{name}.json"
    known = sorted(p.stem for p in models_dir.glob("*.json"))
    if not path.is_file():
        raise InputError(f"{where}: unknown model {name!r}; expected one of {', '.join(known)}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        config = data["hf_config"]
        source = str(data.get("published_config", ""))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a model file ({type(exc).__name__}: {exc})") from None
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size"):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise InputError(f"{path}: hf_config.{key}: expected a whole number above 0")
    return ModelSpec(name=name, hf_config=config, source=source)


def _section(data: dict, name: str, path: Path) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise InputError(f"{path}: [{name}]: expected a table")
    return value


def _read(data: dict, path: Path, fields: dict, kind: type, check) -> dict[str, Any]:
    out = {}
    for section, keys in fields.items():
        table = _section(data, section, path)
        for key, default in keys.items():
            where = f"{path}: {section}.{key}"
            if key not in table:
                if default is None:
                    raise InputError(f"{where}: missing (required)")
                out[_attribute(section, key)] = default
                continue
            value = table[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise InputError(f"{where}: expected {kind.__name__}, got {value!r}")
            check(where, f"{section}.{key}", value)
            out[_attribute(section, key)] = value
    return out


def _attribute(section: str, key: str) -> str:
    """The Plan attribute of a field: rollout.tp is rollout_tp, expect.starts is expect_starts."""
    return f"{section}_{key}" if section in ("rollout", "expect") else key


def _positive(where: str, key: str, value) -> None:
    """Sizes: finite (TOML has nan and inf) and above 0, or 0 where 0 means unset (_OPTIONAL_ZERO)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InputError(f"{where}: expected a finite number above 0, got {value}")
        if value < 0 or (value == 0 and key not in _OPTIONAL_ZERO):
            raise InputError(f"{where}: expected a number above 0, got {value}")


def _no_check(where: str, key: str, value) -> None:
    return None


def load_plan(path: Path, models_dir: Path = MODELS_DIR) -> Plan:
    """Read and validate one plan file; `InputError` names the file and the field on any problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML ({exc})") from None
    known_sections = {"plan", "cluster", "parallel", "batch", "memory", "rollout", "expect"}
    for section, table in data.items():
        if section not in known_sections:
            expected = ", ".join(sorted(known_sections))
            raise InputError(f"{path}: [{section}]: unknown section; expected one of {expected}")
        allowed = _INT_FIELDS.get(section, {}).keys() | _BOOL_FIELDS.get(section, {}).keys() \
            | _STR_FIELDS.get(section, {}).keys() | _FLOAT_FIELDS.get(section, {}).keys()
        for key in table if isinstance(table, dict) else ():
            if key not in allowed:
                expected = ", ".join(sorted(allowed))
                raise InputError(f"{path}: {section}.{key}: unknown field; expected one of {expected}")
    values: dict[str, Any] = {}
    values.update(_read(data, path, _STR_FIELDS, str, _no_check))
    values.update(_read(data, path, _INT_FIELDS, int, _positive))
    values.update(_read(data, path, _FLOAT_FIELDS, float, _positive))
    values.update(_read(data, path, _BOOL_FIELDS, bool, _no_check))
    if values["backend"] not in BACKENDS:
        raise InputError(f"{path}: plan.backend: expected one of {', '.join(BACKENDS)}, got {values['backend']!r}")
    if values["device"] not in DEVICES:
        raise InputError(f"{path}: cluster.device: expected one of {', '.join(DEVICES)}, got {values['device']!r}")
    if values["rollout_engine"] not in ENGINES:
        raise InputError(f"{path}: rollout.engine: expected one of {', '.join(ENGINES)}, got "
                         f"{values['rollout_engine']!r}")
    if not values["expect_starts"] and not values["expect_reason"].strip():
        raise InputError(f"{path}: expect.reason: missing (required when expect.starts = false)")
    model = load_model(values.pop("model"), f"{path}: plan.model", models_dir)
    return Plan(path=path, model=model, **values)
