"""The GRPO options both trainers share, and the one cascade that resolves them.

Defaults < a JSON or TOML file (`--config FILE`, same keys as the flags, with `_` or `-`)
< command-line flags. An unknown key in the file is an error that names it. A backend's config
subclasses `GRPOConfig`, adds its own keys and extends `problems()`.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from trainers.fully_async import option_problems
from trainers.grpo.objective import KL_ESTIMATORS, LOSS_AGGREGATIONS
from trainers.grpo.tasks import TASKS
from trainers.models import MODEL_KINDS
from trainers.rollout import ROLLOUT_CHECKS, ROLLOUTS


@dataclass
class GRPOConfig:
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
    batch_prompts: int = 4  # prompts per step over all data-parallel ranks; each takes an equal share
    max_new_tokens: int = 8
    temperature: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    loss_agg: str = "token-mean"
    clip_eps: float = 0.2
    clip_eps_high: float | None = None  # None: same as clip_eps
    mini_batches: int = 1  # optimizer steps per rollout (each on its share of the batch)
    micro_batches: int = 2  # forward/backward passes per mini-batch, gradients accumulated (grpo/micro_batches)
    ppo_epochs: int = 1
    rollout: str = "hf"
    rollout_check: str = "off"  # generate: the hf engine also samples its first batch with generate, compared
    device: str | None = None  # cpu, cuda or npu; None picks the accelerator present
    metrics: str | None = None  # JSON-lines file, one line per step (written by rank 0)
    metrics_all_ranks: bool = False  # also write METRICS.rank<N> from the other ranks
    nproc_per_node: int = 1  # >1 outside torchrun: re-launch under torch.distributed.run
    mode: str = "sync"  # fully-async: rollout overlaps the update (trainers/fully_async)
    staleness: int = 1  # fully-async: weight versions a sample lags the update it feeds
    tis_cap: float = 2.0  # fully-async: truncation of the importance weight of stale samples

    models = MODEL_KINDS  # the model kinds this backend trains (not a field: no annotation)

    def choices(self) -> dict[str, tuple]:
        return {"model": tuple(self.models), "kl_estimator": KL_ESTIMATORS, "loss_agg": LOSS_AGGREGATIONS,
                "rollout": ROLLOUTS, "task": tuple(TASKS), "rollout_check": ROLLOUT_CHECKS}

    def positive(self) -> tuple[str, ...]:
        return ("steps", "batch_prompts", "max_new_tokens", "mini_batches", "micro_batches", "ppo_epochs",
                "nproc_per_node")

    def problems(self) -> list[str]:
        problems = [f"{key}={getattr(self, key)!r} (expected one of {', '.join(allowed)})"
                    for key, allowed in self.choices().items() if getattr(self, key) not in allowed]
        if self.device not in (None, "cpu", "cuda", "npu"):
            problems.append(f"device={self.device!r} (expected cpu, cuda or npu)")
        if self.group_size < 2:
            problems.append("group_size must be >= 2 (GRPO normalises within a group)")
        problems += [f"{key} must be >= 1" for key in self.positive() if getattr(self, key) < 1]
        if self.lr < 0 or self.temperature <= 0 or self.clip_eps <= 0:
            problems.append("lr must be >= 0, temperature and clip_eps > 0")
        if self.rollout_check != "off" and self.rollout != "hf":
            problems.append(f"rollout_check={self.rollout_check!r} compares the hf engine with generate; "
                            f"rollout={self.rollout!r} has no such check")
        return problems + option_problems(self.mode, self.staleness, self.tis_cap)

    def validate(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("invalid trainer options: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def read_config_file(cls: type[GRPOConfig], path: str | Path) -> dict:
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a table/object of trainer options")
    values = {key.replace("-", "_"): value for key, value in data.items()}
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"{path}: unknown trainer option(s) {', '.join(unknown)}; known: {', '.join(known)}")
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


def build_parser(cls: type[GRPOConfig], prog: str, description: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description, argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", help="a JSON or TOML file with the same keys as these flags")
    for field in fields(cls):
        flag = "--" + field.name.replace("_", "-")
        kind = _flag_type(field)
        if kind is None:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=f"default {field.default}")
        else:
            parser.add_argument(flag, type=kind, help=f"default {field.default}")
    return parser


def resolve(cls: type[GRPOConfig], argv: list[str] | None, prog: str, description: str | None = None):
    """Defaults, then the config file, then the flags; validated."""
    args = vars(build_parser(cls, prog, description).parse_args(argv))
    values: dict = {}
    if args.get("config"):
        values.update(read_config_file(cls, args.pop("config")))
    args.pop("config", None)
    values.update(args)
    config = cls(**values)
    config.validate()
    return config
