"""TRL's GRPOTrainer on the project's tiny Qwen3.5 model and toy task, for harness.benchmarks.grpo.

Runs inside an environment that has TRL (harness.benchmarks.grpo builds it; TRL is not a project dependency)
with the project on PYTHONPATH:

    python -m harness.benchmarks.trl --settings SETTINGS.json --metrics STEPS.jsonl

The settings are the convergence reference's trainer options (the same ones our trainer gets).
Everything TRL lets us match is matched: the model and its seeded weights, the prompts of every
step in the same order, group size, prompts per step, max new tokens, temperature, learning rate,
AdamW without weight decay at a constant rate, gradient clipping, the clip range, no KL, the
token-mean loss, fp32 on one CPU thread (or, with the settings' `device`, on that accelerator, where
accelerate places TRL's model and our trainer has its device plan). Not matched: the sampling noise
(TRL samples with torch's global generator, ours with per-row seeds) and the advantage's epsilon (TRL 1e-4, ours 1e-6).
Steps are logged by harness.benchmarks.grpo's StepClock, as ours are: TRL's whole loop (generation, reward,
update, its own logging) counts.
"""
from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

SPECIAL = {0: "<pad>", 1: "<bos>", 2: "<eos>"}  # the zoo's pad, bos and eos ids


def passes_per_step(settings: dict) -> int:
    """Forward/backward passes over a step's rows (gradient accumulation): the benchmark's `micro_batches`, which
    our side's trainer is given too, so that neither side makes more passes per step."""
    return int(settings["micro_batches"])


def token_name(token_id: int) -> str:
    return SPECIAL.get(token_id, f"t{token_id}")


def ids_to_text(ids: Sequence[int]) -> str:
    return " ".join(token_name(i) for i in ids)


def build_tokenizer(vocab_size: int = 128):
    """A word-level tokenizer whose words are the model's token ids: encode and decode map ids 1:1.

    Built in memory (nothing is downloaded); it adds no special tokens, as our trainer's prompts
    have none.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token_name(i): i for i in range(vocab_size)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", padding_side="left")


def step_prompts(task, seed: int, steps: int, batch_prompts: int) -> list[list[int]]:
    """The prompts our trainer draws at each step (trainers.grpo.loop.GRPOLoop._prompts), in order."""
    prompts = []
    for step in range(steps):
        prompts += task.prompts(batch_prompts, random.Random(seed * 1_000_003 + step))
    return prompts


class RewardRecorder:
    """TRL reward function wrapping the task's reward over token ids; keeps each call's mean."""

    __name__ = "toy_task_reward"  # TRL names its reward metrics after the function

    def __init__(self, task, tokenizer):
        self.task, self.tokenizer, self.means = task, tokenizer, []

    def __call__(self, prompts, completions, completion_ids, **_) -> list[float]:
        prompt_ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        rewards = [self.task.reward(p, c) for p, c in zip(prompt_ids, completion_ids)]
        self.means.append(sum(rewards) / len(rewards))
        return rewards


def run(settings: dict, metrics: Path, work: Path) -> None:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainers.grpo.tasks import make_task
    from trainers.models import build_model
    from trainers.runtime import determinism
    from trainers.runtime.device import cpu_trainer_settings

    from .grpo import StepClock

    s = settings
    device = s.get("device", "cpu")
    if device == "cpu":
        cpu_trainer_settings()  # the settings our trainer runs with: like for like
    determinism.apply(device)
    task = make_task(s["task"])
    tokenizer = build_tokenizer()
    prompts = step_prompts(task, s["seed"], s["steps"], s["batch_prompts"])
    dataset = Dataset.from_list([{"prompt": ids_to_text(p)} for p in prompts])
    reward = RewardRecorder(task, tokenizer)
    config = GRPOConfig(
        output_dir=str(work / "trl-out"), use_cpu=device == "cpu", bf16=False, fp16=False, seed=s["seed"],
        max_steps=s["steps"], per_device_train_batch_size=s["batch_prompts"] * s["group_size"],
        gradient_accumulation_steps=passes_per_step(s), num_generations=s["group_size"],
        max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"], top_p=1.0, top_k=0, learning_rate=s["lr"], lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, optim="adamw_torch", max_grad_norm=s["max_grad_norm"],
        epsilon=s["clip_eps"], beta=s["kl_coef"], num_iterations=1, loss_type="dapo", scale_rewards="group",
        gradient_checkpointing=False, shuffle_dataset=False, dataloader_num_workers=0, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, use_vllm=False)

    class StepLog(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.clock = StepClock(metrics)

        def on_step_end(self, args, state, control, **kwargs):
            self.clock.record(state.global_step - 1, reward.means[-1], torch.get_num_threads())

    model = build_model("text", seed=s["seed"])
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[StepLog()])
    trainer.train()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks.trl", description=__doc__)
    parser.add_argument("--settings", type=Path, required=True)
    parser.add_argument("--metrics", type=Path, required=True)
    args = parser.parse_args(argv)
    run(json.loads(args.settings.read_text(encoding="utf-8")), args.metrics, args.metrics.parent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
