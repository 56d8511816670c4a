"""What the verl rank worker records, on stand-in modules (torch only): where a load leaves each buffer, and what the
vision model's fast_pos_embed_interpolate and pos_embed saw."""
from __future__ import annotations

import torch

from harness.checks.offload_regression.verl_fsdp import CPU_DEVICE_ID, PlacementRecorder, pos_embed_watched


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("inv_freq", torch.ones(2))
        self.register_buffer("other", torch.ones(2))


def test_the_recorder_tells_verls_moves_to_the_device_from_moves_to_the_host():
    model = Rotary()
    recorder = PlacementRecorder(model, CPU_DEVICE_ID)
    with recorder:  # verl's fsdp2_load_full_state_dict under offload: everything to the host, then buffers back
        model.to("cpu")
        model.inv_freq.data = model.inv_freq.data.to(CPU_DEVICE_ID)
    summary = recorder.summary()
    assert summary["buffers_on_device"] == ["inv_freq"] and summary["buffers_on_host"] == ["other"]
    assert summary["parameters_last_moved_to"] == ["host"]
    assert summary["buffer_moves"][-1] == "inv_freq -> cpu:0"


class Vision(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos_embed = torch.nn.Embedding(4, 2)

    def fast_pos_embed_interpolate(self, grid):
        return self.pos_embed(grid)

    def forward(self, grid, call: bool):
        return self.fast_pos_embed_interpolate(grid) if call else self.pos_embed(grid)


class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.visual = Vision()


def test_the_watcher_counts_the_patched_method_and_restores_it():
    model = Wrapper()
    with pos_embed_watched(model) as seen:
        model.model.visual(torch.tensor([0, 1]), call=True)
        model.model.visual(torch.tensor([2]), call=False)
    assert seen["method_calls"] == 1 and seen["verl_method"] is False
    assert seen["method"].endswith("Vision.fast_pos_embed_interpolate")
    assert len(seen["embedding_calls"]) == 2 and seen["index_off_weight_device"] is False
    assert "fast_pos_embed_interpolate" in vars(Vision) and not hasattr(vars(Vision)["fast_pos_embed_interpolate"],
                                                                        "__wrapped__")
    with pos_embed_watched(torch.nn.Linear(1, 1)) as none:
        pass
    assert none == {"vision": False}
