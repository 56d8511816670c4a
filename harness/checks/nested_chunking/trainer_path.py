"""The `grpo-update/trainer` verdict: the GRPO update's own micro-batching, on a rollout batch.

Both trainers (FSDP2 and Megatron-core) split their batches in the loop they share,
trainers.grpo.loop.GRPOLoop.update, through trainers.grpo.micro_batches.split: padding removed (jagged
token and position ids), mini- and micro-batches cut by trainers.grpo.data.chunk_tensordict, each
padded back. This verdict runs that split on a batch with ragged prompts and responses and fails when
the micro-batches, put back together, are not the batch row for row, or when the split did not go
through chunk_tensordict (then the family verdicts would test a function the trainers do not run).
"""
from __future__ import annotations

from harness.results.records import Status, Verdict

NAME = "grpo-update/trainer"
SPLITS = ((1, 2), (2, 2), (1, 3))  # (mini-batches, micro-batches per mini-batch)


def rollout_batch(rows: int = 12, prompt_width: int = 6, response_width: int = 5):
    """A batch as the rollout engines lay it out: prompts of 1..prompt_width tokens left-padded,
    responses of 1..response_width tokens right-padded (pad id 0, token ids from 1)."""
    import torch

    from trainers.rollout import RolloutBatch

    generator = torch.Generator().manual_seed(0)
    width = prompt_width + response_width
    input_ids = torch.zeros(rows, width, dtype=torch.long)
    attention = torch.zeros(rows, width, dtype=torch.long)
    response_mask = torch.zeros(rows, response_width)
    prompts = [1 + (row * 5) % prompt_width for row in range(rows)]
    for row, prompt in enumerate(prompts):
        answer = 1 + (row * 3) % response_width
        span = slice(prompt_width - prompt, prompt_width + answer)
        input_ids[row, span] = torch.randint(1, 100, (prompt + answer,), generator=generator)
        attention[row, span] = 1
        response_mask[row, :answer] = 1
    logprobs = -torch.rand(rows, response_width, generator=generator) * response_mask
    return RolloutBatch(input_ids, attention, response_mask, logprobs, prompts, prompt_width)


def _counting(module):
    calls = []
    real = module.chunk_tensordict

    def counted(td, chunks):
        calls.append(chunks)
        return real(td, chunks)

    return counted, calls


def _rejoined_problem(batch, advantages, old, parts, mini: int, micro: int) -> str | None:
    import torch

    flat = [m for part in parts for m in part]
    if len(parts) != mini or any(len(part) != micro for part in parts):
        return f"{[len(p) for p in parts]} micro-batches per mini-batch, expected {mini} x {micro}"
    pairs = {"input_ids": (torch.cat([m.batch.input_ids for m in flat]), batch.input_ids),
             "attention_mask": (torch.cat([m.batch.attention_mask for m in flat]), batch.attention_mask),
             "response_mask": (torch.cat([m.batch.response_mask for m in flat]), batch.response_mask),
             "logprobs": (torch.cat([m.batch.logprobs for m in flat]), batch.logprobs),
             "advantages": (torch.cat([m.advantages for m in flat]), advantages),
             "old_logprobs": (torch.cat([m.old_logprobs for m in flat]), old)}
    wrong = [key for key, (got, want) in pairs.items() if got.shape != want.shape or not torch.equal(got, want)]
    if [n for m in flat for n in m.batch.prompt_lengths] != list(batch.prompt_lengths):
        wrong.append("prompt_lengths")
    return f"rejoined micro-batches differ in {', '.join(wrong)}" if wrong else None


def verdict() -> Verdict:
    """Looks the split and the chunker up at call time, so a test can break either."""
    import torch

    from trainers.grpo import data, micro_batches

    batch = rollout_batch()
    advantages = torch.linspace(-1.0, 1.0, batch.input_ids.shape[0])
    old = batch.logprobs * 1.5
    outcomes, problems, real = {}, [], data.chunk_tensordict
    for mini, micro in SPLITS:
        key = f"mini={mini},micro={micro}"
        counted, calls = _counting(data)
        data.chunk_tensordict = counted
        try:
            parts = micro_batches.split(batch, advantages, mini, micro, old_logprobs=old)
            problem = _rejoined_problem(batch, advantages, old, parts, mini, micro)
        except Exception as exc:  # noqa: BLE001 - a split that raises is this verdict's finding
            problem = f"raises:{type(exc).__name__}: {exc}"
        finally:
            data.chunk_tensordict = real
        if problem is None and calls != [mini] + [micro] * mini:
            problem = f"chunk_tensordict calls {calls}, expected {[mini] + [micro] * mini}: not the trainers' path"
        outcomes[key] = problem or "ok"
        if problem:
            problems.append(f"{key}: {problem}")
    if problems:
        return Verdict(NAME, Status.FAIL, "; ".join(problems), metrics=outcomes)
    return Verdict(NAME, Status.PASS, "the GRPO update's micro-batches (through chunk_tensordict) rejoin to "
                   "its batch exactly", metrics=outcomes)
