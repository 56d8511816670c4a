"""The Hugging Face rollout engine: `generate` (or, for Qwen3.5's text and MoE causal LMs, the same decoding
over the model's cache: cached_decode) over a plain copy of the policy, sampled with per-row noise."""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
from transformers import LogitsProcessorList

from trainers.rollout import cached_decode
from trainers.rollout.batch import RolloutBatch, RolloutMismatch, left_pad, row_seeds
from trainers.rollout.fingerprint import fingerprint
from trainers.worst import worst

# Logits of the cached decode loop against generate's: measured equal to float32 rounding (5e-7 on logits of
# magnitude 5); a real difference (a wrong position, a stale cache) moves them by far more.
GENERATE_CHECK_TOLERANCE = 1e-4


class RowNoise:
    """A logits processor that turns greedy decoding into sampling with per-row seeds.

    argmax(logits / T + Gumbel noise) is a sample of softmax(logits / T) (the Gumbel-max trick).
    The noise of row r comes from r's own seed, so a row's sample depends only on (weights,
    prompt, seed), never on the other rows of the batch or on how ranks split it.
    """

    def __init__(self, seeds: Sequence[int], steps: int, vocab_size: int, temperature: float, prompt_width: int,
                 device):
        noise = torch.stack([torch.rand(steps, vocab_size, generator=torch.Generator().manual_seed(s),
                                        dtype=torch.float64) for s in seeds])
        self.gumbel = -torch.log(-torch.log(noise.clamp(min=1e-20))).to(device=device, dtype=torch.float32)
        self.temperature, self.prompt_width = temperature, prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_width
        return scores.float() / self.temperature + self.gumbel[:, step, : scores.shape[-1]]


class HFRollout:
    """Hugging Face `generate` over a plain (unsharded) copy of the policy, with the KV cache.

    It holds its own copy of the policy, as a separate inference engine would; the trainer
    pushes its weights with `sync_weights` after every update. Sampling is greedy decoding over
    `RowNoise`, so it is reproducible per row; the log-probs are those of the raw logits at the
    sampling temperature (the greedy case, temperature 0, reports the untempered ones).
    """

    def __init__(self, model: torch.nn.Module, copy_model: bool = True, eos_token_id: int | None = None,
                 pad_token_id: int | None = None, check_against_generate: bool = False):
        """`check_against_generate`: where the cached decode loop samples, sample the first batch with transformers'
        `generate` too and stop (RolloutMismatch) unless it gives the same tokens and logits within
        GENERATE_CHECK_TOLERANCE; the outcome is kept in `generate_check`. The checks run their trainers so, to keep
        `generate` under test in every cell."""
        self.model = copy.deepcopy(model) if copy_model else model
        self.model.eval()
        for parameter in self.model.parameters():
            parameter.requires_grad_(False)
        config = getattr(self.model.config, "text_config", self.model.config)
        self.eos_token_id = eos_token_id if eos_token_id is not None else getattr(config, "eos_token_id", None)
        pad = pad_token_id if pad_token_id is not None else getattr(config, "pad_token_id", None)
        self.pad_token_id = 0 if pad is None else pad
        self.vocab_size = config.vocab_size
        self.layer_types = list(getattr(config, "layer_types", None) or ["linear_attention"])
        self.use_cache, self.cache_error = True, None
        self.check_against_generate, self.generate_check = check_against_generate, None
        self._own_state: dict[str, torch.Tensor] | None = None  # the engine's tensors, by state-dict name
        self._dtypes = {key: tensor.dtype for key, tensor in self.model.state_dict().items()}  # kept by syncs

    def sync_weights(self, weights) -> None:
        state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
        own = self._own_state if self._own_state is not None else self.model.state_dict()
        if state.keys() != own.keys() or any(own[k].shape != state[k].shape for k in own):
            self.model.load_state_dict(state, strict=True)  # raises, naming what differs
            return
        with torch.no_grad():  # in place, tensor by tensor: what load_state_dict does, without its module walk
            for key, tensor in own.items():
                tensor.copy_(state[key])
        self._own_state = own

    def held_fingerprint(self) -> str:
        """The fingerprint of every tensor the engine holds now (trainers/rollout/fingerprint.py)."""
        return fingerprint(self.model.state_dict().items())

    def fingerprint_of(self, state: dict) -> str:
        """What `held_fingerprint` reads once `state` is loaded: its tensors in this engine's dtypes (the cast
        `sync_weights` makes). Touches none of the engine's tensors, so any thread may call it."""
        missing = sorted(self._dtypes.keys() - state.keys())
        if missing:
            raise ValueError(f"the state lacks {len(missing)} of the engine's tensors, e.g. {missing[0]}")
        return fingerprint((key, state[key].detach().to(dtype=dtype)) for key, dtype in self._dtypes.items())

    def close(self) -> None:
        """Nothing to release: the engine is a module in this process."""

    def _generate(self, **kwargs):
        """`generate`, with the KV cache where the model's cache works.

        Qwen3.5's stock cache rejects a model without any linear-attention layer in transformers
        5.3 to 5.9 (a ValueError at its first or second use). Such a model then decodes without a
        cache, recomputing the whole sequence each step: slower, same tokens and log-probs.
        """
        if self.use_cache:
            try:
                return self.model.generate(**kwargs, use_cache=True)
            except ValueError as exc:
                if "linear_attention" in self.layer_types:
                    raise
                self.use_cache, self.cache_error = False, f"{type(exc).__name__}: {exc}"
        return self.model.generate(**kwargs, use_cache=False)

    def generate(self, prompt_ids, max_new_tokens: int, temperature: float = 1.0, seed=0) -> RolloutBatch:
        # Inference mode, not only no_grad: no version counters or view records for the engine's thousands of small
        # ops (2.4 ms of a 28 ms rollout on CPU). Its tensors cannot enter autograd, which the trainer's forward on
        # the batch does: the batch leaves as ordinary copies.
        with torch.inference_mode():
            batch = self._sample(prompt_ids, max_new_tokens, temperature, seed)
        tensors = ("input_ids", "attention_mask", "response_mask", "logprobs")
        return dataclasses.replace(batch, **{name: getattr(batch, name).clone() for name in tensors})

    def _sample(self, prompt_ids, max_new_tokens: int, temperature: float, seed) -> RolloutBatch:
        device = next(self.model.parameters()).device
        seeds = row_seeds(seed, len(prompt_ids))
        prompt, prompt_mask = left_pad(prompt_ids, self.pad_token_id)
        rows, width = prompt.shape
        sampling = temperature > 0
        processors = [RowNoise(seeds, max_new_tokens, self.vocab_size, temperature, width, device)] if sampling else []
        prompt, prompt_mask = prompt.to(device), prompt_mask.to(device)
        if self.use_cache and cached_decode.applies_to(self.model, self.layer_types):
            sequences, raw_logits = cached_decode.decode(self.model, prompt, prompt_mask, max_new_tokens, processors,
                                                         self.eos_token_id, self.pad_token_id)
            if self.check_against_generate:
                self._compare_with_generate(prompt, prompt_mask, max_new_tokens, processors, sequences, raw_logits)
        else:
            sequences, raw_logits = self._hf_generate(prompt, prompt_mask, max_new_tokens, processors)
        steps = len(raw_logits)
        responses = torch.full((rows, max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
        responses[:, :steps] = sequences[:, width:width + steps]
        logits = torch.stack(raw_logits, dim=1).float()  # (B, steps, V): the raw logits of each step
        scaled = logits / temperature if sampling else logits
        logprobs = torch.zeros((rows, max_new_tokens), dtype=torch.float32, device=device)
        logprobs[:, :steps] = torch.log_softmax(scaled, dim=-1).gather(-1, responses[:, :steps, None]).squeeze(-1)
        response_mask = self._response_mask(responses)
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, self.pad_token_id))
        return RolloutBatch(
            input_ids=torch.cat([prompt, responses], dim=1),
            attention_mask=torch.cat([prompt_mask, response_mask], dim=1),
            response_mask=response_mask,
            logprobs=logprobs * response_mask,
            prompt_lengths=[len(p) for p in prompt_ids],
            prompt_width=width,
        )

    def _hf_generate(self, prompt, prompt_mask, max_new_tokens: int, processors) -> tuple[torch.Tensor, tuple]:
        out = self._generate(
            input_ids=prompt, attention_mask=prompt_mask, max_new_tokens=max_new_tokens, min_new_tokens=0,
            do_sample=False, num_beams=1, logits_processor=LogitsProcessorList(processors),
            eos_token_id=self.eos_token_id, pad_token_id=self.pad_token_id, output_logits=True,
            return_dict_in_generate=True, temperature=None, top_p=None, top_k=None)
        return out.sequences, out.logits

    def _compare_with_generate(self, prompt, prompt_mask, max_new_tokens: int, processors, sequences,
                               raw_logits) -> None:
        """The first batch again through transformers' `generate`: the same tokens, logits within the tolerance."""
        theirs, their_logits = self._hf_generate(prompt, prompt_mask, max_new_tokens, processors)
        same_tokens = theirs.shape == sequences.shape and torch.equal(theirs, sequences)
        diff = worst((float((a - b).abs().max()) for a, b in zip(raw_logits, their_logits)), default=0.0) \
            if len(raw_logits) == len(their_logits) else float("inf")
        self.generate_check = {"same_tokens": same_tokens, "max_logit_diff": diff, "steps": len(raw_logits)}
        if not same_tokens or not diff <= GENERATE_CHECK_TOLERANCE:  # NaN disagrees
            raise RolloutMismatch(
                f"transformers' generate and the cached decode loop disagree on the first rollout batch: "
                f"{'same' if same_tokens else 'different'} tokens ({len(their_logits)} against {len(raw_logits)} "
                f"steps), logits differ by up to {diff:.3g} (tolerance {GENERATE_CHECK_TOLERANCE:g})")
        self.check_against_generate = False

    def _response_mask(self, responses: torch.Tensor) -> torch.Tensor:
        """1 up to and including each row's first EOS, 0 after it."""
        if self.eos_token_id is None:
            return torch.ones_like(responses)
        eos = (responses == self.eos_token_id).long()
        return ((eos.cumsum(dim=1) - eos) == 0).long()
