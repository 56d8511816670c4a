"""The rotary-buffer device fixes (trainers.patches.offload_device): applicable on 5.2-5.8 only,
the stock numbers, the buffer put back, and no host tensor left in device compute."""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from harness.checks.offload_regression.strict_device import StrictDeviceMode, name_host, on_device
from trainers.patches.base import installed_version
from trainers.patches.offload_device import PATCHES, buffer_on

pytestmark = pytest.mark.versions

BUGGY = Version("5.2") <= installed_version("transformers") < Version("5.9")
VISION_ROTARY_BUGGY = Version("5.9") <= installed_version("transformers") < Version("5.20")


def test_applicable_exactly_where_the_sites_exist():
    for patch in PATCHES:
        ok, reason = patch.applicable()
        vision_rotary = patch.name.endswith("VisionRotaryEmbedding.forward")
        assert ok is (VISION_ROTARY_BUGGY if vision_rotary else BUGGY), reason
        if not ok:
            assert "not applicable to transformers" in reason
            assert ("<5.20" if vision_rotary else "<5.9") in reason


class _OldVisionRotary(torch.nn.Module):  # 5.9-5.16: forward(position_ids), the buffer multiplied as it is
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(1.0, 5.0), persistent=False)

    def forward(self, position_ids):
        return (position_ids.unsqueeze(-1) * self.inv_freq).flatten(1)


class _NewVisionRotary(_OldVisionRotary):  # 5.17-5.19: forward(x, position_ids)
    def forward(self, x, position_ids):
        return position_ids[..., None].float() * self.inv_freq.float()


@pytest.mark.parametrize("module, inputs", [(_OldVisionRotary, 1), (_NewVisionRotary, 2)])
def test_vision_rotary_fix_takes_both_signatures_and_leaves_no_host_buffer(module, inputs):
    from trainers.patches.offload_device import _vision_rotary

    rotary = module()
    args = [torch.ones(3, 4), torch.arange(6.0).reshape(2, 3)][-inputs:]
    stock = rotary(*args)
    name_host(rotary.inv_freq, "buffer", "rotary.inv_freq")
    with StrictDeviceMode() as mode:
        rotary(*[on_device(a) for a in args])
    assert [m.tensor for m in mode.mixes] == ["rotary.inv_freq"]  # the stock code mixes the host buffer in
    fixed = _vision_rotary(type(rotary).forward)
    with StrictDeviceMode() as mode:
        out = fixed(rotary, *[on_device(a) for a in args])
    assert mode.mixes == [] and torch.equal(out, stock)


def test_buffer_on_moves_for_the_call_and_puts_the_buffer_back():
    module = torch.nn.Module()
    module.register_buffer("inv_freq", torch.ones(2), persistent=False)
    original = module.inv_freq
    with buffer_on(module, "inv_freq", torch.device("meta")):
        assert module.inv_freq.device.type == "meta"
    assert module.inv_freq is original
    with buffer_on(module, "inv_freq", torch.device("cpu")):  # already there: untouched
        assert module.inv_freq is original


@pytest.mark.skipif(not BUGGY, reason="the fixes apply to transformers 5.2-5.8 only")
def test_text_rotary_fix_keeps_the_numbers_and_the_buffer_off_the_host():
    from trainers.models import build_model

    rotary = build_model("text").model.rotary_emb
    x = torch.randn(1, 5, 64)
    positions = torch.arange(5)[None]
    stock_cos, stock_sin = rotary(x, positions)
    name_host(rotary.inv_freq, "buffer", "rotary_emb.inv_freq")
    with StrictDeviceMode() as mode:
        rotary(on_device(x), on_device(positions))
    assert [m.tensor for m in mode.mixes] == ["rotary_emb.inv_freq"]  # the stock code mixes the buffer in
    patch = next(p for p in PATCHES if p.name.endswith("Qwen3_5TextRotaryEmbedding.forward"))
    original = rotary.inv_freq
    with patch.applied_context(), StrictDeviceMode() as mode:
        cos, sin = rotary(on_device(x), on_device(positions))
    assert mode.mixes == [] and rotary.inv_freq is original
    assert torch.equal(cos, stock_cos) and torch.equal(sin, stock_sin)
