"""Image inputs for the vision-language Qwen3.5 in vLLM, and the trainer's log-probs on them.

vLLM's multimodal processor needs the model's Hugging Face processor (an image processor, a video
processor and a tokenizer that knows the vision tokens), so `save_processor` builds a tiny one in
memory, sized to the tiny model's vision config, and saves it beside the weights: nothing is
downloaded. An image prompt is `<|vision_start|><|image_pad|><|vision_end|>` then text; vLLM expands
the one `<|image_pad|>` to the image's merged patch count and returns the expanded prompt, which the
trainer then scores with the same pixels (from the same processor) and its own mRoPE positions.
"""
from __future__ import annotations

from dataclasses import dataclass

# Images small enough for one CPU thread: 32 x 24 pixels is an 8 x 6 grid of 4-pixel patches, 12
# tokens after the 2 x 2 merge; the pixel bounds keep vLLM's profiling image (the largest allowed)
# at 64 x 64.
IMAGE_SIZE = (32, 24)  # width, height
MIN_PIXELS, MAX_PIXELS = 8 * 8, 64 * 64
VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


@dataclass
class ImageRow:
    """One vLLM response to an image prompt, with the pixels the trainer needs to score it."""

    input_ids: list[int]  # the prompt as vLLM expanded it, then the response tokens
    prompt_length: int
    logprobs: list[float]  # the engine's, one per response token
    pixel_values: object  # torch tensors, as the saved processor makes them
    grid: object

    @property
    def response_length(self) -> int:
        return len(self.input_ids) - self.prompt_length


def _tokenizer(config):
    """A word-level tokenizer over the tiny vocabulary whose vision tokens have the config's ids."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    ids = dict(zip(VISION_TOKENS, (config.image_token_id, config.video_token_id, config.vision_start_token_id,
                                   config.vision_end_token_id)))
    taken = set(ids.values())
    vocab = {f"w{i}": i for i in range(config.text_config.vocab_size) if i not in taken}
    vocab.update(ids)
    made = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")),
                                   unk_token="w0", pad_token="w0", eos_token=f"w{config.text_config.eos_token_id}")
    made.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    return made


def save_processor(config, directory: str) -> None:
    """The tiny model's processor (image, video, tokenizer), saved where vLLM loads the model."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    vision = config.vision_config
    geometry = {"patch_size": vision.patch_size, "merge_size": vision.spatial_merge_size,
                "temporal_patch_size": vision.temporal_patch_size,
                "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}}
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(**geometry), tokenizer=_tokenizer(config),
                     video_processor=Qwen3VLVideoProcessor(**geometry)).save_pretrained(directory)


def images(count: int, seed: int) -> list:
    """`count` deterministic noise images (PIL), IMAGE_SIZE each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (IMAGE_SIZE[1], IMAGE_SIZE[0], 3), dtype=np.uint8))
            for _ in range(count)]


def image_prompt(config, text: list[int]) -> list[int]:
    return [config.vision_start_token_id, config.image_token_id, config.vision_end_token_id, *text]


def generate(rollout, config, directory: str, prompts: list[list[int]], seeds: list[int], image_seed: int,
             max_new_tokens: int, temperature: float) -> list[ImageRow]:
    """The engine's responses to `prompts`, each distinct prompt behind its own noise image (rows of a
    GRPO group share their prompt, so they share the image)."""
    from transformers import AutoImageProcessor

    distinct = list(dict.fromkeys(map(tuple, prompts)))
    pictures = dict(zip(distinct, images(len(distinct), image_seed)))
    shown = [pictures[tuple(p)] for p in prompts]
    processor = AutoImageProcessor.from_pretrained(directory)
    rows = rollout.generate_multimodal([image_prompt(config, p) for p in prompts], shown, max_new_tokens,
                                       temperature, seeds)
    out = []
    for row, picture in zip(rows, shown):
        inputs = processor(images=[picture], return_tensors="pt")
        out.append(ImageRow(row.prompt_ids + row.response_ids, len(row.prompt_ids), row.logprobs,
                            inputs["pixel_values"], inputs["image_grid_thw"]))
    return out


def row_logits(policy, row: ImageRow):
    """The policy's logits (fp32) at the row's response positions; mRoPE positions come from the
    model itself (it builds them from image_grid_thw and mm_token_type_ids)."""
    import torch

    device = next(policy.parameters()).device
    input_ids = torch.tensor([row.input_ids], device=device)
    logits = policy(input_ids=input_ids, pixel_values=row.pixel_values.to(device),
                    image_grid_thw=row.grid.to(device),
                    mm_token_type_ids=(input_ids == policy.config.image_token_id).int()).logits.float()[0]
    return logits[row.prompt_length - 1:-1]  # position t predicts token t + 1


def row_logprobs(policy, row: ImageRow):
    """The policy's log-probs of the row's response tokens at temperature 1 (autograd kept)."""
    import torch

    logits = row_logits(policy, row)
    targets = torch.tensor(row.input_ids[row.prompt_length:], device=logits.device)
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None]).squeeze(-1)


def logprob_error(policy, rows: list[ImageRow]) -> float:
    """Max |engine - trainer| log-prob over every response token of the image rows."""
    import torch

    with torch.no_grad():
        return max(float((row_logprobs(policy, row).cpu() - torch.tensor(row.logprobs)).abs().max())
                   for row in rows if row.response_length)


def greedy_agreement(policy, rows: list[ImageRow], margin: float) -> dict:
    """As vllm_rollout.greedy_agreement, for image rows."""
    import torch

    counts = {"tokens": 0, "judged": 0, "differ": 0, "ties": 0}
    with torch.no_grad():
        for row in rows:
            top2 = row_logits(policy, row).topk(2, dim=-1)
            clear = (top2.values[:, 0] - top2.values[:, 1] > margin).cpu()
            differ = (top2.indices[:, 0].cpu() != torch.tensor(row.input_ids[row.prompt_length:])) & clear
            counts["tokens"] += row.response_length
            counts["judged"] += int(clear.sum())
            counts["differ"] += int(differ.sum())
            counts["ties"] += int((~clear).sum())
    return counts


def padded_logprobs(policy, rows: list[ImageRow], width: int):
    """(B, width) trainer log-probs with autograd, and the response mask, for a GRPO loss."""
    import torch

    logprobs = torch.zeros((len(rows), width), device=next(policy.parameters()).device)
    mask = torch.zeros_like(logprobs)
    for index, row in enumerate(rows):
        logprobs[index, :row.response_length] = row_logprobs(policy, row)
        mask[index, :row.response_length] = 1
    return logprobs, mask
