"""Qwen3.5 GRPO trainers (FSDP2 and Megatron-core), the tiny model zoo and the patch set."""
