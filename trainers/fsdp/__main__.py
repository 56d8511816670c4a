"""`python -m trainers.fsdp [flags]`: a short GRPO run on a tiny (or local) Qwen3.5 model.

Starting, relaunching under torchrun and the exit statuses: trainers/launch.py.
"""
from __future__ import annotations

from trainers import launch


def _train(config):
    from .train import run

    return run(config)


def _summary(config, records: list[dict]) -> str:
    first, last = records[0], records[-1]
    return f"GRPO {config.model}: {len(records)} steps, reward {first['reward_mean']:.3f} -> {last['reward_mean']:.3f}"


def main(argv: list[str] | None = None) -> int:
    from .config import resolve

    return launch.main("trainers.fsdp", argv, resolve, _train, _summary)


if __name__ == "__main__":
    launch.exit_with(main)
