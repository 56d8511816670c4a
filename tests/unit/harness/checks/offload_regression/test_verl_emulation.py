"""The strict device emulation fed with verl's placement: verl's units and device buffers (torch only), and one step
of verl's engine under it with verl's patch (needs verl), where the break test puts the stock
fast_pos_embed_interpolate back in place of verl's fix: red on transformers 5.2-5.8, "not called" from 5.9."""
from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from harness.checks.offload_regression.strict_device import StrictDeviceMode, on_device
from harness.checks.offload_regression.verl_emulation import VerlOffloadedRun
from harness.checks.offload_regression.verl_verdicts import emulation_verdicts
from harness.results.records import Status


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 2.0))

    def forward(self, x):
        return self.inner(x) * self.scale


def _mixes(device_buffers: set[str]) -> list:
    model, mode = Scaled(), StrictDeviceMode()
    with VerlOffloadedRun(model, mode, ["inner", "<root>"], device_buffers):
        model(on_device(torch.ones(2, 4))).sum().backward()
    assert isinstance(model.scale, torch.Tensor) and not hasattr(model.scale, "_strict_device_origin")
    return mode.mixes


def test_a_buffer_verl_put_on_the_device_meets_no_host_compute_and_one_left_on_the_host_does():
    assert _mixes({"scale"}) == []
    [mix] = _mixes(set())
    assert (mix.tensor_kind, mix.tensor, mix.module_class) == ("buffer", "scale", "Scaled")


def test_units_hold_their_parameters_on_the_device_only_inside_their_forward():
    model, mode = Scaled(), StrictDeviceMode()
    seen = []
    model.inner.register_forward_pre_hook(lambda m, a: seen.append(type(m.weight).__name__))
    with VerlOffloadedRun(model, mode, ["<root>", "inner"], {"scale"}):
        model(on_device(torch.ones(1, 4)))
        assert type(model.inner.weight).__name__ == "Parameter"
    assert seen == ["DeviceTensor"] and mode.mixes == []


# --- one step of verl's engine (needs verl) ------------------------------------------------------------------------

# The units verl's apply_fsdp2 makes for the zoo's VL model and the buffers its fsdp2_load_full_state_dict moves to the
# device (measured on the ranks by tests/e2e/test_offload_regression_verl.py, the same on 5.3.0 and 5.9.0).
VL_UNITS = ["<root>", "model.visual.pos_embed", "model.visual.blocks.0", "model.visual.blocks.1",
            "model.language_model.embed_tokens", *[f"model.language_model.layers.{i}" for i in range(4)], "lm_head"]
VL_DEVICE_BUFFERS = {"model.language_model.rotary_emb.inv_freq", "model.language_model.rotary_emb.original_inv_freq",
                     "model.visual.rotary_pos_emb.inv_freq"}


def _step(model_type: str = "qwen3_5"):
    pytest.importorskip("verl.workers.engine.fsdp.transformer_impl")
    import transformers

    from harness.checks.offload_regression.verl_emulation import emulated_step

    release = Version(transformers.__version__)
    if release >= Version("5.11"):  # outside verl 0.9's range: its qwen3_5 module does not import (5.23)
        with pytest.raises(ImportError):
            emulated_step(model_type, VL_UNITS, VL_DEVICE_BUFFERS)
        pytest.skip("verl's patch does not import on this transformers")
    torch.set_num_threads(1)
    emulated = emulated_step(model_type, VL_UNITS, VL_DEVICE_BUFFERS)
    return release, emulated, {v.name: v for v in emulation_verdicts(model_type, emulated, "", [])}


@pytest.mark.verl
@pytest.mark.versions
def test_verls_step_meets_no_host_tensor_under_its_own_placement():
    release, emulated, verdicts = _step()
    assert not emulated["raised"] and emulated["same_loss"] and emulated["sites"] == {}
    pos = verdicts["verl:qwen3_5/pos-embed"]
    assert pos.status is Status.PASS and pos.emulated
    if release >= Version("5.9"):
        assert "patch target not called: the fix is not needed on this release" in pos.message
    else:
        assert "called fast_pos_embed_interpolate 1 times, verl's" in pos.message


@pytest.mark.verl
@pytest.mark.versions
def test_verls_pos_embed_fix_reverted_turns_the_verdict_red_where_the_method_runs(monkeypatch):
    pytest.importorskip("verl.workers.engine.fsdp.transformer_impl")
    import transformers.models.qwen3_5.modeling_qwen3_5 as qwen3_5
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as qwen3_5_moe

    stock = {cls: vars(cls).get("fast_pos_embed_interpolate")
             for cls in (qwen3_5.Qwen3_5VisionModel, qwen3_5_moe.Qwen3_5MoeVisionModel)}

    def stock_method(self, grid_thw):  # each vision model's own stock method
        return next(stock[c] for c in type(self).__mro__ if stock.get(c))(self, grid_thw)

    verl_qwen3_5 = pytest.importorskip("verl.models.transformers.qwen3_5", exc_type=ImportError)
    monkeypatch.setattr(verl_qwen3_5, "fast_pos_embed_interpolate", stock_method)  # what apply_monkey_patch installs
    release, emulated, verdicts = _step()
    pos = verdicts["verl:qwen3_5/pos-embed"]
    if release < Version("5.9"):
        assert pos.status is Status.FAIL and "fast_pos_embed_interpolate" in pos.message
        assert verdicts["verl:qwen3_5/step"].status is Status.FAIL
    else:
        assert pos.status is Status.PASS and "patch target not called" in pos.message
