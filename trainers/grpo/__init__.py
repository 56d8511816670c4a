"""GRPO itself, for both backends: the loop, its configuration, the objective (advantages, clipped ratio,
truncated importance sampling), the reward tasks, the micro-batching and the metrics file."""
