"""Greedy decoding over a causal LM's own KV cache, with the model inputs `generate` gives it.

The Hugging Face rollout engine samples by greedy decoding over processed scores (the Gumbel noise
of trainers.rollout.RowNoise). For a tiny model `generate` spends about as long around the model
as one forward takes (generation-config validation, stopping criteria, logits-processor signature
checks, model-kwargs bookkeeping: about 4 ms of a 30 ms rollout on the development machine). This
loop calls the same model with the inputs `generate` passes it, read from a run of `generate`
itself on each release (transformers 5.3: `cache_position` on every call, the model making its
cache at the prefill; 5.23: no `cache_position`): the prompt with its attention mask and
`use_cache`, then each sampled token with the mask grown by one and the returned cache. It keeps
generate's rules: raw logits of the last position in float32, scores from the processors, argmax,
the pad id for rows that already ended, stop when every row has its EOS or at the token budget.
tests/unit/trainers/rollout/test_cached_decode.py checks it gives the same tokens and log-probs as `generate` on
the newest transformers and (nox -s tests-affected) on 5.3.0: the same tokens, log-probs equal to float32
rounding (CPU kernels round the last bit by where their buffers land, which any extra allocation
before a forward moves: a plain forward of generate's own inputs differs from generate's by one
unit in the last place on some rows until the inputs are copied first).

Rows with the same prompt (a GRPO group: every row of it has the same padded prompt and mask) are prefilled once
and the cache is then expanded to every row by the cache's own `reorder_cache`, the index_select of beam search.
It is the one expansion that reaches the linear-attention states on every release this runs on: 5.2 and 5.3's
`Qwen3_5DynamicCache.reorder_cache` selects key, value, conv and recurrent states; from 5.5 `Cache.reorder_cache`
asks each layer, and the linear-attention layers define it (`batch_repeat_interleave`, what `generate` uses for
`num_return_sequences`, calls a method those layers lack). The decode steps then run on all rows, as before.

`applies_to(model)` limits it to what that equality was shown for: the text and MoE causal LMs of
Qwen3.5 with linear-attention layers (their cache), and a generation config that adds no logits
processor of its own; anything else (the vision-language model, whose positions generate computes
from the images) goes through `generate`.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

import torch

CAUSAL_LMS = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM")
# What a generation config made from a model config holds (ids, outputs, bookkeeping); anything else it sets
# apart from the defaults (a repetition penalty, suppressed tokens, ...) may add a logits processor to generate.
PLAIN_GENERATION_KEYS = {"bos_token_id", "eos_token_id", "pad_token_id", "transformers_version", "_from_model_config",
                         "use_cache", "output_attentions", "output_hidden_states", "output_scores", "output_logits",
                         "return_dict_in_generate"}


def applies_to(model: torch.nn.Module, layer_types: Sequence[str]) -> bool:
    if type(model).__name__ not in CAUSAL_LMS or "linear_attention" not in layer_types:
        return False
    config = getattr(model, "generation_config", None)
    return config is None or set(config.to_diff_dict()) <= PLAIN_GENERATION_KEYS


@functools.cache
def _takes_cache_position(base_class: type) -> bool:
    """Whether the decoder's forward takes `cache_position` (5.3 does, 5.23 not): asked once per class."""
    return "cache_position" in inspect.signature(base_class.forward).parameters


def decode(model: torch.nn.Module, prompt: torch.Tensor, prompt_mask: torch.Tensor, max_new_tokens: int,
           processors: Sequence[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]], eos_token_id: int | None,
           pad_token_id: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(prompt and sampled tokens (rows, width + steps), the raw float32 logits of each step), as
    `generate(..., do_sample=False, logits_processor=processors, output_logits=True)` returns them."""
    rows, width = prompt.shape
    positions = _takes_cache_position(type(getattr(model, "model", model)))
    sequences, mask, logits_steps = prompt, prompt_mask, []
    unfinished = torch.ones(rows, dtype=torch.bool, device=prompt.device)
    extra = {"cache_position": torch.arange(width, device=prompt.device)} if positions else {}
    distinct, expand = prompt_groups(prompt, prompt_mask)
    if expand is None:
        out = model(input_ids=prompt, attention_mask=mask, use_cache=True, return_dict=True, **extra)
        last, cache = out.logits[:, -1], out.past_key_values
    else:
        out = model(input_ids=prompt[distinct], attention_mask=mask[distinct], use_cache=True, return_dict=True,
                    **extra)
        last, cache = out.logits[:, -1][expand], expand_cache(out.past_key_values, expand)
    for step in range(max_new_tokens):
        logits = last.to(copy=True, dtype=torch.float32)
        logits_steps.append(logits)
        scores = logits
        for processor in processors:
            scores = processor(sequences, scores)
        tokens = torch.where(unfinished, scores.argmax(dim=-1), pad_token_id)  # a row that ended: the pad id
        sequences = torch.cat([sequences, tokens[:, None]], dim=-1)
        if eos_token_id is not None:
            unfinished &= tokens != eos_token_id
        if step + 1 == max_new_tokens or not bool(unfinished.any()):
            break
        mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=-1)
        extra = {"cache_position": torch.tensor([width + step], device=prompt.device)} if positions else {}
        out = model(input_ids=tokens[:, None], attention_mask=mask, past_key_values=cache, use_cache=True,
                    return_dict=True, **extra)
        last, cache = out.logits[:, -1], out.past_key_values
    return sequences, logits_steps


def prompt_groups(prompt: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[list[int], torch.Tensor | None]:
    """(the first row of each distinct padded prompt, each row's index among them), or ([], None) when no two rows
    share a prompt. Rows count as the same only with the same tokens and the same mask."""
    seen: dict[tuple, int] = {}
    first_rows: list[int] = []
    groups = []
    for row, key in enumerate(zip(map(tuple, prompt.tolist()), map(tuple, prompt_mask.tolist()))):
        if key not in seen:
            seen[key] = len(first_rows)
            first_rows.append(row)
        groups.append(seen[key])
    if len(first_rows) == len(groups):
        return [], None
    return first_rows, torch.tensor(groups, device=prompt.device)


def expand_cache(cache, expand: torch.Tensor):
    """The prefilled cache of the distinct prompts, as the cache of every row (row i takes state `expand[i]`)."""
    cache.reorder_cache(expand)
    return cache
