"""trainers.rollout: left padding, and the engine chosen by name; vLLM refused clearly where it is absent."""
import importlib.util

import pytest
import torch
from qwen35_helpers import model_or_skip

from trainers.rollout import left_pad, make_rollout


def test_left_pad_and_engine_choice():
    ids, mask = left_pad([[5], [6, 7, 8]], pad_id=0)
    assert ids.tolist() == [[0, 0, 5], [6, 7, 8]] and mask.tolist() == [[0, 0, 1], [1, 1, 1]]
    with pytest.raises(ValueError):
        make_rollout("sglang", torch.nn.Linear(1, 1))
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(RuntimeError):
            make_rollout("vllm", model_or_skip(), model_dir=".")
