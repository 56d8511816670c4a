"""The Megatron GRPO trainer's options, in the FSDP trainer's style: one dataclass, one cascade.

Defaults < a JSON or TOML file (`--config FILE`) < command-line flags; an unknown key is an
error that names it. The GRPO keys are the FSDP trainer's; the Megatron keys add the parallel
sizes (`tp`, `pp`, `cp`, `ep`), the model variant and the batch layout. A packed layout
(`use_remove_padding`, `packed`, `qkv_format = "thd"`) is refused by the trainer before any step
with `PackedBatchesRefused`, its reason measured on the built model (packed.py): megatron-core
0.16.1's Gated DeltaNet raises on THD input.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

from ..fsdp.config import TrainConfig as _FSDPConfig
from ..grpo import KL_ESTIMATORS, LOSS_AGGREGATIONS
from ..rollout import ROLLOUTS
from ..tasks import TASKS

# The GRPO defaults are the FSDP trainer's, read from it, so both backends run the same job.
_GRPO = _FSDPConfig()

# hybrid: the model as configured (Gated DeltaNet + full attention layers: the real Qwen3.5);
# full-attention: the same model with every layer a full-attention layer (an extra comparison).
VARIANTS = ("hybrid", "full-attention")
MODELS = ("text", "moe")


class PackedBatchesRefused(ValueError):
    """A packed (remove-padding / THD) layout was asked for and cannot run here; the message says why."""


@dataclass(frozen=True)
class ParallelSizes:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp


@dataclass
class MegatronTrainConfig:
    model: str = "text"
    model_config: str | None = None  # JSON file merged over the zoo's config
    model_path: str | None = None  # a local checkpoint directory (real weights)
    variant: str = "hybrid"
    task: str = _GRPO.task
    steps: int = _GRPO.steps
    seed: int = _GRPO.seed
    lr: float = _GRPO.lr
    weight_decay: float = _GRPO.weight_decay
    max_grad_norm: float = _GRPO.max_grad_norm
    group_size: int = _GRPO.group_size
    batch_prompts: int = _GRPO.batch_prompts  # prompts per step over all data-parallel ranks
    max_new_tokens: int = _GRPO.max_new_tokens
    temperature: float = _GRPO.temperature
    kl_coef: float = _GRPO.kl_coef
    kl_estimator: str = _GRPO.kl_estimator
    loss_agg: str = _GRPO.loss_agg
    clip_eps: float = _GRPO.clip_eps
    clip_eps_high: float | None = _GRPO.clip_eps_high
    mini_batches: int = _GRPO.mini_batches
    ppo_epochs: int = _GRPO.ppo_epochs
    rollout: str = _GRPO.rollout
    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline parallel
    cp: int = 1  # context parallel
    ep: int = 1  # expert parallel
    qkv_format: str = "bshd"
    use_remove_padding: bool = False
    packed: bool = False
    device: str | None = None
    metrics: str | None = None
    metrics_all_ranks: bool = False
    nproc_per_node: int = 1  # >1 outside torchrun: re-launch under torch.distributed.run

    @property
    def sizes(self) -> ParallelSizes:
        return ParallelSizes(self.tp, self.pp, self.cp, self.ep)

    @property
    def wants_packed(self) -> bool:
        return self.use_remove_padding or self.packed or self.qkv_format.lower() == "thd"

    def validate(self) -> None:
        problems = []
        choices = {"model": MODELS, "variant": VARIANTS, "qkv_format": ("bshd", "thd"), "kl_estimator": KL_ESTIMATORS,
                   "loss_agg": LOSS_AGGREGATIONS, "rollout": ROLLOUTS, "task": tuple(TASKS)}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                problems.append(f"{key}={getattr(self, key)!r} (expected one of {', '.join(allowed)})")
        if self.device not in (None, "cpu", "cuda", "npu"):
            problems.append(f"device={self.device!r} (expected cpu, cuda or npu)")
        if self.group_size < 2:
            problems.append("group_size must be >= 2 (GRPO normalises within a group)")
        for key in ("steps", "batch_prompts", "max_new_tokens", "mini_batches", "ppo_epochs", "nproc_per_node",
                    "tp", "pp", "cp", "ep"):
            if getattr(self, key) < 1:
                problems.append(f"{key} must be >= 1")
        # Accepted as config, not implemented by this trainer: say so rather than run something else.
        for key, what in (("pp", "pipeline"), ("cp", "context")):
            if getattr(self, key) > 1:
                problems.append(f"{key}={getattr(self, key)}: {what} parallelism is not implemented by this "
                                "trainer (tensor, expert and data parallelism are)")
        if self.ep > 1 and self.model != "moe":
            problems.append(f"ep={self.ep}: expert parallelism needs the moe model")
        if self.lr < 0 or self.temperature <= 0 or self.clip_eps <= 0:
            problems.append("lr must be >= 0, temperature and clip_eps > 0")
        if problems:
            raise ValueError("invalid trainer options: " + "; ".join(problems))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_KEYS = {f.name: f for f in fields(MegatronTrainConfig)}


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
    parser = argparse.ArgumentParser(prog="python -m trainers.megatron", description=__doc__,
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


def resolve(argv: list[str] | None = None) -> MegatronTrainConfig:
    """Defaults, then the config file, then the flags; validated."""
    args = vars(build_parser().parse_args(argv))
    values: dict = {}
    if args.get("config"):
        values.update(read_config_file(args.pop("config")))
    args.pop("config", None)
    values.update(args)
    config = MegatronTrainConfig(**values)
    config.validate()
    return config
