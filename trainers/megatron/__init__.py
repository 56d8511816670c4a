"""GRPO on megatron-core for the tiny Qwen3.5 models, through a Hugging Face <-> Megatron bridge."""
