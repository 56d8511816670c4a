"""The FSDP GRPO trainer's options: one dataclass, resolved through one cascade.

Defaults < a JSON or TOML file (`--config FILE`, same keys as the flags, with `_` or `-`)
< command-line flags. An unknown key in the file is an error that names it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from ..grpo import KL_ESTIMATORS, LOSS_AGGREGATIONS
from ..models import MODEL_KINDS
from ..rollout import ROLLOUTS
from ..tasks import TASKS
from .parallelize import SHARD_POLICIES


@dataclass
class TrainConfig:
    model: str = "text"
    model_config: str | None = None  # JSON file merged over the zoo's config
    model_path: str | None = None  # a local checkpoint directory (real weights)
    task: str = "target-set"
    steps: int = 20
    seed: int = 0
    lr: float = 5e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    group_size: int = 8
    batch_prompts: int = 4  # prompts per step over all ranks; each rank takes an equal share
    max_new_tokens: int = 8
    temperature: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    loss_agg: str = "token-mean"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None  # None: same as clip_eps
    mini_batches: int = 1  # optimizer steps per rollout (each on its share of the batch)
    ppo_epochs: int = 1
    offload: bool = False
    shard: str = "auto"  # auto: FSDP2 when there is more than one rank or offload; always: also one rank
    grad_checkpointing: bool = False
    rollout: str = "hf"
    device: str | None = None  # cpu, cuda or npu; None picks the accelerator present
    metrics: str | None = None  # JSON-lines file, one line per step (written by rank 0)
    metrics_all_ranks: bool = False  # also write METRICS.rank<N> from the other ranks
    nproc_per_node: int = 1  # >1 outside torchrun: re-launch under torch.distributed.run

    def validate(self) -> None:
        problems = []
        choices = {"model": MODEL_KINDS, "kl_estimator": KL_ESTIMATORS, "loss_agg": LOSS_AGGREGATIONS,
                   "rollout": ROLLOUTS, "task": tuple(TASKS), "shard": SHARD_POLICIES}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                problems.append(f"{key}={getattr(self, key)!r} (expected one of {', '.join(allowed)})")
        if self.device not in (None, "cpu", "cuda", "npu"):
            problems.append(f"device={self.device!r} (expected cpu, cuda or npu)")
        if self.group_size < 2:
            problems.append("group_size must be >= 2 (GRPO normalises within a group)")
        for key in ("steps", "batch_prompts", "max_new_tokens", "mini_batches", "ppo_epochs", "nproc_per_node"):
            if getattr(self, key) < 1:
                problems.append(f"{key} must be >= 1")
        if self.lr < 0 or self.temperature <= 0 or self.clip_eps <= 0:
            problems.append("lr must be >= 0, temperature and clip_eps > 0")
        if problems:
            raise ValueError("invalid trainer options: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_KEYS = {f.name: f for f in fields(TrainConfig)}


def read_config_file(path: str | Path) -> dict:
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a table/object of trainer options")
    values = {key.replace("-", "_"): value for key, value in data.items()}
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown trainer option(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}")
    return values


def _flag_type(field: dataclasses.Field):
    kind = str(field.type)
    if "bool" in kind:
        return None
    if "int" in kind:
        return int
    if "float" in kind:
        return float
    return str


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers.fsdp", description=__doc__,
                                     argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", help="a JSON or TOML file with the same keys as these flags")
    for name, field in _KEYS.items():
        flag = "--" + name.replace("_", "-")
        kind = _flag_type(field)
        if kind is None:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=f"default {field.default}")
        else:
            parser.add_argument(flag, type=kind, help=f"default {field.default}")
    return parser


def resolve(argv: list[str] | None = None) -> TrainConfig:
    """Defaults, then the config file, then the flags; validated."""
    args = vars(build_parser().parse_args(argv))
    values: dict = {}
    if args.get("config"):
        values.update(read_config_file(args.pop("config")))
    args.pop("config", None)
    values.update(args)
    config = TrainConfig(**values)
    config.validate()
    return config
