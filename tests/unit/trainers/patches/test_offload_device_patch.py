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


def test_applicable_exactly_where_the_sites_exist():
    for patch in PATCHES:
        ok, reason = patch.applicable()
        assert ok is BUGGY, reason
        if not BUGGY:
            assert "not applicable to transformers" in reason and "<5.9" in reason


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
