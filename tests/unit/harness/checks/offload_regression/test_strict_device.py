"""The strict device mode and the offload set-up on tiny modules: a planted host tensor is caught
and named, a module without one passes with the same numbers."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.checks.offload_regression.offload_setup import OffloadedRun, fsdp_units
from harness.checks.offload_regression.strict_device import FAKE_DEVICE, StrictDeviceMode, on_device


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


class Block(nn.Module):
    def __init__(self, planted: str = ""):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.table = nn.Embedding(4, 4)  # its own FSDP unit, as the trainer wraps every embedding
        self.planted = planted
        self.scale = torch.full((4,), 2.0)  # a plain attribute: stays on the host
        self.register_buffer("shift", torch.ones(4), persistent=False)

    def forward(self, x):
        y = self.proj(x)
        if self.planted == "attribute":
            return y * self.scale
        if self.planted == "created":
            return y + torch.arange(4)  # made on the host, not on x.device
        if self.planted == "buffer":
            return y + self.shift
        if self.planted == "weight-device":  # the 5.2-5.8 pattern: indices built on an offloaded weight's device
            return y + self.table(torch.arange(3, device=self.table.weight.device))
        return y * self.scale.to(x.device) + self.shift.to(x.device) + torch.arange(4, device=x.device)


class Tiny(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self, planted: str = ""):
        super().__init__()
        self.block = Block(planted)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.block(x)).sum()


def _run(planted: str, raise_on_mix: bool = False):
    torch.manual_seed(0)
    model = Tiny(planted)
    x = torch.randn(3, 4)
    mode = StrictDeviceMode(raise_on_mix=raise_on_mix)
    with OffloadedRun(model, mode):
        loss = model(on_device(x))
        loss.backward()
    return model, mode, loss


def test_a_module_without_host_tensors_passes_with_the_same_numbers():
    torch.manual_seed(0)
    plain = Tiny()
    expected = plain(torch.randn(3, 4))
    expected.backward()
    model, mode, loss = _run("")
    assert mode.mixes == []
    assert loss.device == FAKE_DEVICE and float(loss) == float(expected)
    assert torch.equal(model.block.proj.weight.grad, plain.block.proj.weight.grad)  # gradients reach the host weight
    assert type(model.block.proj.weight) is nn.Parameter  # put back as it was


@pytest.mark.parametrize(("planted", "kind", "name"), [
    ("attribute", "attribute", "block.scale"),
    ("buffer", "buffer", "block.shift"),
    ("created", "created", "Block.forward"),
    ("weight-device", "created", "Block.forward"),
])
def test_a_planted_host_tensor_is_caught_and_named(planted, kind, name):
    _, mode, _ = _run(planted)
    module = ("block.table", "Embedding") if planted == "weight-device" else ("block", "Block")
    assert [(m.module, m.module_class, m.tensor_kind, m.tensor) for m in mode.mixes] == [(*module, kind, name)]
    assert "test_strict_device.py:forward:" in mode.mixes[0].where


def test_raise_on_mix_fails_as_the_accelerator_would():
    with pytest.raises(RuntimeError, match="same device.*attribute block.scale"):
        _run("attribute", raise_on_mix=True)


def test_scalars_copies_and_host_indices_are_allowed():
    x = on_device(torch.randn(4, 3))
    with StrictDeviceMode() as mode:
        y = x * torch.tensor(2.0) + x[torch.tensor([0, 2])].sum()  # 0-dim scalar, host index
        y.copy_(torch.zeros(4, 3))  # an explicit copy
        host = y.cpu()
    assert mode.mixes == [] and host.device.type == "cpu" and y.device == FAKE_DEVICE
    with StrictDeviceMode() as mode:
        x + host
    assert [(m.call, m.tensor_kind) for m in mode.mixes] == [("add", "created")]


def test_units_follow_the_trainers_fsdp_policy():
    model = Tiny()
    assert fsdp_units(model) == [model.block.table, model.block, model]


def test_offloaded_model_is_built_on_meta_and_gets_the_weights_of_a_normal_build(monkeypatch):
    from harness.checks.offload_regression import offload_setup
    from trainers.models import ONE_OF_EACH, build_model, one_of_each

    seen = []
    register = torch.nn.Module.register_parameter
    monkeypatch.setattr(offload_setup, "_parameters_on_meta", _spy(offload_setup._parameters_on_meta, seen))
    model = offload_setup.offloaded_model("text", None, 0)
    assert seen and all(device == "meta" for device in seen)  # every parameter was registered on meta
    assert torch.nn.Module.register_parameter is register  # and the build hook is gone
    assert model.config.layer_types == ONE_OF_EACH["layer_types"]  # the check's depth, where no config is given
    reference = build_model("text", one_of_each("text"), seed=0)
    assert model.state_dict().keys() == reference.state_dict().keys()
    for (name, p), (_, q) in zip(model.state_dict().items(), reference.state_dict().items()):
        assert p.device.type == "cpu" and torch.equal(p, q), name


def _spy(context, seen):
    import contextlib

    @contextlib.contextmanager
    def spied():
        with context():
            register = torch.nn.Module.register_parameter

            def record(module, name, param):
                register(module, name, param)
                if param is not None:
                    seen.append(module._parameters[name].device.type)

            torch.nn.Module.register_parameter = record
            try:
                yield
            finally:
                torch.nn.Module.register_parameter = register
    return spied
