"""verl's FSDP engine calling a tiny Qwen3.5 model the way its trainer does: what the `verl:` verdicts of
patch-parity and offload-regression run, in rows that install verl.

- The models, by the model type verl dispatches its patches on: `qwen3_5` and `qwen3_5_text` are the project's
  zoo (trainers/models.py: VL and text); `qwen3_5_moe` is the VL MoE model, assembled from the zoo's MoE text
  config and its VL vision config (the zoo's own MoE model is text-only, `qwen3_5_moe_text`).
- The micro-batch: three sequences of a padded rollout (an image in the second on the VL models) turned into
  verl's micro-batch by verl's own helpers: position ids from `AgentLoopWorker._compute_position_ids` (the
  model's `get_rope_index` bound to a stand-in processor, as verl binds it to its processor; plain positions
  for a text model), then `left_right_2_no_padding` (nested, no padding), images as a stack of per-sample dicts.
- The engine: an `FSDPEngineWithLMHead` made without its `__init__` (which builds a whole worker from configs),
  given only what `forward_step`, `prepare_model_inputs` and `prepare_model_outputs` read, and
  `pass_packed_cu_seqlens` from the test verl's `_build_model_optimizer` runs on the patched model. The step is
  verl's `forward_step`: the micro-batch moved to verl's device, the model called with what `prepare_model_inputs`
  made (packed: input ids (1, total), position ids, `cu_seqlens`; padded: (B, S)), per-token log-probs from
  `prepare_model_outputs`.
- `patches_restored`: `apply_monkey_patch` replaces class attributes process-wide; each model runs inside it, so
  one model's patch never reaches the next (verl trains one model per process).

Nothing here imports verl, torch or transformers at module level.
"""
from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.checks.support.verl import ACCELERATOR_ONLY

MODEL_TYPES = ("qwen3_5", "qwen3_5_moe", "qwen3_5_text")
VISION_TYPES = ("qwen3_5", "qwen3_5_moe")
LENGTHS = (7, 13, 5)  # one sequence shorter than the conv kernel would not be packed differently: all are longer
IMAGE_GRID = (1, 4, 4)  # 16 patches, 4 tokens after the 2x2 merge
_INSTALLED = re.compile(r"/\S*?/site-packages/")  # where the environment lives: dropped from error text


def build_model(model_type: str, seed: int = 0):
    """The tiny model of `model_type` with the zoo's deterministic weights (float32)."""
    import torch

    from trainers.models import Qwen35Unavailable, default_config
    from trainers.models import build_model as zoo_model

    if model_type == "qwen3_5_text":
        return zoo_model("text", seed=seed)
    if model_type == "qwen3_5":
        return zoo_model("vl", seed=seed)
    if model_type != "qwen3_5_moe":
        raise ValueError(f"unknown model type {model_type!r}; expected one of {', '.join(MODEL_TYPES)}")
    vl = default_config("vl")  # raises Qwen35Unavailable on a transformers without Qwen3.5
    try:
        from transformers.models.qwen3_5_moe import configuration_qwen3_5_moe, modeling_qwen3_5_moe
    except ImportError as exc:
        raise Qwen35Unavailable(f"Qwen3.5 MoE is unavailable in this transformers: {exc}") from exc
    text = {**default_config("moe"), "rope_parameters": vl["text_config"]["rope_parameters"]}
    config = configuration_qwen3_5_moe.Qwen3_5MoeConfig(**{**vl, "text_config": text})
    torch.manual_seed(seed)
    return modeling_qwen3_5_moe.Qwen3_5MoeForConditionalGeneration(config)


def make_rows(model, seed: int = 1) -> list[dict[str, Any]]:
    """The rollout: three token sequences (LENGTHS); on a VL model the second carries one image."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    config = model.config
    vision = getattr(config, "vision_config", None)
    high = min(getattr(config, "image_token_id", 100), 100)
    rows = []
    for index, length in enumerate(LENGTHS):
        ids = torch.randint(3, high, (length,), generator=generator)
        row: dict[str, Any] = {"input_ids": ids}
        if vision is not None and index == 1:
            grid = torch.tensor([IMAGE_GRID])
            tokens = int(grid.prod()) // vision.spatial_merge_size ** 2
            image = [config.vision_start_token_id] + [config.image_token_id] * tokens + [config.vision_end_token_id]
            patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
            row = {"input_ids": torch.cat([ids[:3], torch.tensor(image), ids[3:]]), "image_grid_thw": grid,
                   "pixel_values": torch.randn(int(grid.prod()), patch_dim, generator=generator)}
        rows.append(row)
    return rows


def micro_batch(model, rows: list[dict[str, Any]], use_remove_padding: bool):
    """verl's micro-batch of `rows`, made by verl's helpers (see the module docstring)."""
    import torch
    from tensordict import TensorDict
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    count, width = len(rows), max(len(r["input_ids"]) for r in rows)
    input_ids = torch.zeros(count, width, dtype=torch.long)
    attention_mask = torch.zeros(count, width, dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row["input_ids"])] = row["input_ids"]
        attention_mask[i, : len(row["input_ids"])] = 1
    vision = getattr(model.config, "vision_config", None) is not None
    processor = None if not vision else SimpleNamespace(
        get_rope_index=model.model.get_rope_index, image_token_id=model.config.image_token_id,
        video_token_id=model.config.video_token_id)
    worker = SimpleNamespace(processor=processor)
    positions, images = [], []
    for i, row in enumerate(rows):
        media = {k: row[k] for k in ("pixel_values", "image_grid_thw") if k in row}
        # verl's processor output carries mm_token_type_ids; verl recomputes them from the token ids
        positions.append(AgentLoopWorker._compute_position_ids(worker, input_ids[i: i + 1], attention_mask[i: i + 1],
                                                               dict(media, mm_token_type_ids=True))[0])
        images.append(media)
    td = TensorDict({"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": attention_mask,
                     "position_ids": torch.stack(positions)}, batch_size=[count])
    td = left_right_2_no_padding(td)
    if vision:
        tu.assign_non_tensor_stack(td, "multi_modal_inputs", images)
    tu.assign_non_tensor(td, temperature=1.0, use_remove_padding=use_remove_padding, calculate_entropy=True)
    return td


def engine(model, autocast_dtype=None):
    """An FSDPEngineWithLMHead around `model` without its __init__ (see the module docstring); `autocast_dtype`
    is the engine's mixed-precision parameter dtype (float32: no autocast)."""
    from inspect import signature

    import torch
    from verl.utils import torch_functional as verl_functional
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    eng = object.__new__(FSDPEngineWithLMHead)
    eng.module = model
    eng.pad_to_length, eng.pad_to_length_bucket = False, None
    eng.ulysses_sequence_parallel_size, eng.use_ulysses_sp, eng.ulysses_device_mesh = 1, False, None
    eng.engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)
    eng.compute_entropy_from_logits = verl_functional.entropy_from_logits
    eng._autocast_dtype = autocast_dtype or torch.float32
    try:  # verl's own test (transformer_impl.py, _build_model_optimizer)
        eng.pass_packed_cu_seqlens = "cu_seqlens" in signature(model.forward).parameters
    except (TypeError, ValueError):
        eng.pass_packed_cu_seqlens = False
    return eng


def log_prob_loss(model_output, data, dp_group):
    """A loss for verl's forward_step: minus the sum of the per-token log-probs (every one gets a gradient)."""
    return -model_output["log_probs"].values().float().sum(), {}


def step(eng, td, loss: Callable | None = None) -> tuple[Any, list]:
    """verl's forward_step on `td`: (the loss, or None without `loss`; per-sequence log-probs, detached, of the
    next token at positions 0..L-2)."""
    value, output = eng.forward_step(td, loss_function=loss, forward_only=loss is None)
    per_sequence = [t[:-1].float().cpu() for t in output["model_output"]["log_probs"].unbind()]
    return (value if loss is not None else None), per_sequence


def verl_functions() -> dict[str, Callable]:
    """The verl functions a step runs, for verdict(..., ran=...)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.utils.padding import left_right_2_no_padding

    return {"apply_monkey_patch": apply_monkey_patch, "left_right_2_no_padding": left_right_2_no_padding,
            "compute_position_ids": AgentLoopWorker._compute_position_ids,
            "forward_step": FSDPEngineWithLMHead.forward_step,
            "prepare_model_inputs": FSDPEngineWithLMHead.prepare_model_inputs,
            "prepare_model_outputs": FSDPEngineWithLMHead.prepare_model_outputs}


def apply_patch(model) -> None:
    """verl's apply_monkey_patch as verl's FSDP engine calls it for training with remove-padding."""
    from verl.models.transformers.monkey_patch import apply_monkey_patch

    with contextlib.redirect_stdout(None):  # it prints a line per patch
        apply_monkey_patch(model=model, use_remove_padding=True, ulysses_sp_size=1, use_fused_kernels=False)


@contextlib.contextmanager
def patches_restored() -> Iterator[None]:
    """Every Qwen3.5 class and transformers' flash-attention entry as they were, after the block."""
    import importlib

    modules = [importlib.import_module(f"transformers.models.{m}.modeling_{m}") for m in ("qwen3_5", "qwen3_5_moe")]
    saved = [(cls, dict(vars(cls))) for module in modules for cls in vars(module).values()
             if isinstance(cls, type) and cls.__module__ == module.__name__]
    flash = importlib.import_module("transformers.integrations.flash_attention")
    flash_forward = getattr(flash, "_flash_attention_forward", None)
    try:
        yield
    finally:
        for cls, attributes in saved:
            for name in [n for n in vars(cls) if n not in attributes]:
                delattr(cls, name)
            for name, value in attributes.items():
                if vars(cls).get(name) is not value and name not in ("__dict__", "__weakref__"):
                    setattr(cls, name, value)
        if flash_forward is not None:
            flash._flash_attention_forward = flash_forward


def failure(exc: BaseException) -> dict[str, Any]:
    """What a verdict keeps of an exception: its class, first line, the innermost verl or transformers frame
    (file:line), and, for a package only accelerators have, why it cannot run here."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/verl/" in f.filename or "/transformers/" in f.filename] or frames
    where = ""
    if ours:
        parts = Path(ours[-1].filename).parts
        start = min((i for i, p in enumerate(parts) if p in ("verl", "transformers")), default=len(parts) - 1)
        where = f"{'/'.join(parts[start:])}:{ours[-1].lineno}"
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    here = (f"{where} imports {missing}, a package only accelerator machines have: it runs on a GPU/NPU runner"
            if missing and missing.split(".")[0] in ACCELERATOR_ONLY else "")
    first = _INSTALLED.sub("", str(exc).splitlines()[0][:300]) if str(exc) else ""
    return {"error_class": type(exc).__name__, "error": first, "where": where, "cannot_run_here": here}
