"""The FSDP2 GRPO trainer for tiny (and real) Qwen3.5 models."""
