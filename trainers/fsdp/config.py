"""The FSDP GRPO trainer's options: the shared GRPO keys (trainers/grpo/config.py) plus sharding.

Defaults < a JSON or TOML file (`--config FILE`, same keys as the flags, with `_` or `-`)
< command-line flags. An unknown key in the file is an error that names it.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainers.grpo import config as grpo_config

from .parallelize import SHARD_POLICIES


@dataclass
class TrainConfig(grpo_config.GRPOConfig):
    offload: bool = False
    shard: str = "auto"  # auto: FSDP2 when there is more than one rank or offload; always: also one rank
    grad_checkpointing: bool = False

    def choices(self) -> dict[str, tuple]:
        return {**super().choices(), "shard": SHARD_POLICIES}


def resolve(argv: list[str] | None = None) -> TrainConfig:
    """Defaults, then the config file, then the flags; validated."""
    return grpo_config.resolve(TrainConfig, argv, "python -m trainers.fsdp", __doc__)
