"""The Megatron GRPO trainer's options: the shared GRPO keys (trainers/grpo/config.py) plus its own.

Defaults < a JSON or TOML file (`--config FILE`) < command-line flags; an unknown key is an
error that names it. The Megatron keys add the parallel sizes (`tp`, `pp`, `cp`, `ep`), the
model variant and the batch layout. A packed layout (`use_remove_padding`, `packed`,
`qkv_format = "thd"`) is refused by the trainer before any step with `PackedBatchesRefused`, its
reason measured on the built model (packed.py): megatron-core 0.16.1's Gated DeltaNet raises on
THD input.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainers.errors import TrainerInputError
from trainers.grpo import config as grpo_config

# hybrid: the model as configured (Gated DeltaNet + full attention layers: the real Qwen3.5);
# full-attention: the same model with every layer a full-attention layer (an extra comparison).
VARIANTS = ("hybrid", "full-attention")
MODELS = ("text", "moe")


class PackedBatchesRefused(TrainerInputError):
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
class MegatronTrainConfig(grpo_config.GRPOConfig):
    variant: str = "hybrid"
    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline parallel
    cp: int = 1  # context parallel
    ep: int = 1  # expert parallel
    qkv_format: str = "bshd"
    use_remove_padding: bool = False
    packed: bool = False

    models = MODELS

    @property
    def sizes(self) -> ParallelSizes:
        return ParallelSizes(self.tp, self.pp, self.cp, self.ep)

    @property
    def wants_packed(self) -> bool:
        return self.use_remove_padding or self.packed or self.qkv_format.lower() == "thd"

    def choices(self) -> dict[str, tuple]:
        return {**super().choices(), "variant": VARIANTS, "qkv_format": ("bshd", "thd")}

    def positive(self) -> tuple[str, ...]:
        return (*super().positive(), "tp", "pp", "cp", "ep")

    def problems(self) -> list[str]:
        problems = super().problems()
        # Accepted as config, not implemented by this trainer: say so rather than run something else.
        for key, what in (("pp", "pipeline"), ("cp", "context")):
            if getattr(self, key) > 1:
                problems.append(f"{key}={getattr(self, key)}: {what} parallelism is not implemented by this "
                                "trainer (tensor, expert and data parallelism are)")
        if self.ep > 1 and self.model != "moe":
            problems.append(f"ep={self.ep}: expert parallelism needs the moe model")
        return problems


def resolve(argv: list[str] | None = None) -> MegatronTrainConfig:
    """Defaults, then the config file, then the flags; validated."""
    return grpo_config.resolve(MegatronTrainConfig, argv, "python -m trainers.megatron", __doc__)
