"""`python -m trainers.megatron [flags]`: a short GRPO run of a Qwen3.5 text model on megatron-core.

Same command line and config style as `python -m trainers.fsdp`, plus `--tp/--pp/--cp/--ep`,
`--model` (text or moe), `--variant` (hybrid or full-attention) and the batch layout flags (packed layouts are
refused, exit 2; a variant megatron-core cannot build exits 3). Starting, relaunching under torchrun and the
exit statuses: trainers/launch.py.
"""
from __future__ import annotations

from trainers import launch


def _train(config):
    from .train import run

    return run(config)


def _summary(config, records: list[dict]) -> str:
    first, last = records[0], records[-1]
    return (f"GRPO megatron {config.variant} tp={config.tp}: {len(records)} steps, reward "
            f"{first['reward_mean']:.3f} -> {last['reward_mean']:.3f} (bridge {last.get('bridge', 'n/a')})")


def main(argv: list[str] | None = None) -> int:
    from .config import resolve

    return launch.main("trainers.megatron", argv, resolve, _train, _summary)


if __name__ == "__main__":
    launch.exit_with(main)
