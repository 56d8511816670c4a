#!/usr/bin/env bash
# A fixture written for the harness's tests, shaped like verl's Qwen3.5 example scripts (not one of them):
# knobs with defaults, a device probe, a case on DEVICE, arrays of Hydra overrides, a launch piped to tee.
set -xeuo pipefail

DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}
MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3.5-27B"}
GEN_TP=${GEN_TP:-4}
n_devices_per_node=8

case "${DEVICE}" in
    gpu) ;;
    npu) n_devices_per_node=16 ;;
    *) echo "Unsupported DEVICE=${DEVICE}" >&2; exit 1 ;;
esac

start_time=$(date +%Y%m%d)
mkdir -p logs
touch "${HOME}/created-by-the-script"

DATA=(
    algorithm.adv_estimator=grpo
    data.train_batch_size=64
    data.max_prompt_length=1024
    data.max_response_length=$((1024 * 2))
)
ACTOR=(
    actor_rollout_ref.model.path=${MODEL_PATH}
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.ppo_mini_batch_size=16
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
    actor_rollout_ref.actor.use_dynamic_bsz=False
    actor_rollout_ref.actor.fsdp_config.param_offload=True
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size=${GEN_TP}
    actor_rollout_ref.rollout.n=5
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1
    trainer.n_gpus_per_node=${n_devices_per_node}
    trainer.nnodes=1
    trainer.logger='["console"]'
)

python3 -m verl.trainer.main_ppo "${DATA[@]}" "${ACTOR[@]}" "$@" 2>&1 | tee "logs/run-${start_time}.log"
