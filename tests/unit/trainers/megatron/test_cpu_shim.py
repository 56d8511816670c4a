"""The CPU shim for megatron-core: installed and removed cleanly on CPU, never on an accelerator."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

from trainers.megatron.cpu_shim import CpuShim, NoShim, cpu_shim_for  # noqa: E402
from trainers.runtime.device import DevicePlan  # noqa: E402

pytestmark = pytest.mark.slow  # importing megatron-core alone takes 10-30 s on a shared CPU


def _tracker_state():
    from megatron.core.tensor_parallel import random as mrandom

    return mrandom._CUDA_RNG_STATE_TRACKER, mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED


def test_accelerator_plan_patches_nothing(monkeypatch):
    import megatron.core.tensor_parallel as tensor_parallel

    seeded = []
    monkeypatch.setattr(tensor_parallel, "model_parallel_cuda_manual_seed", lambda seed: seeded.append(seed))
    before = (torch.cuda.current_device, _tracker_state(), torch._dynamo.config.disable)
    shim = cpu_shim_for(DevicePlan("cuda", "nccl", pin_memory=True, mixed_precision=True))
    assert isinstance(shim, NoShim)
    shim.install(seed=3)
    assert seeded == [3]  # Megatron's own CUDA seeding, no replacement
    assert (torch.cuda.current_device, _tracker_state(), torch._dynamo.config.disable) == before
    shim.remove()


def test_cpu_shim_installs_both_and_removes_them():
    from megatron.core.tensor_parallel import get_cuda_rng_tracker
    from megatron.core.utils import GlobalMemoryBuffer

    original_device, original_tracker = torch.cuda.current_device, _tracker_state()
    shim = cpu_shim_for(DevicePlan("cpu", "gloo", pin_memory=False, mixed_precision=False))
    assert isinstance(shim, CpuShim)
    with shim.install(seed=5):
        assert torch.cuda.current_device() == torch.device("cpu")
        assert GlobalMemoryBuffer().get_tensor((2, 3), torch.float32, "x").device.type == "cpu"
        tracker = get_cuda_rng_tracker()
        outer = torch.get_rng_state()
        with tracker.fork():
            first = torch.nn.functional.dropout(torch.ones(64), 0.5)
        assert torch.equal(torch.get_rng_state(), outer)  # the default stream is untouched
        with tracker.fork():
            second = torch.nn.functional.dropout(torch.ones(64), 0.5)
        assert not torch.equal(first, second)  # the forked stream advanced
    assert torch.cuda.current_device is original_device
    assert _tracker_state() == original_tracker
    shim.remove()  # idempotent
    assert torch.cuda.current_device is original_device


def test_cpu_shim_forks_reproducibly_per_seed():
    def draw(seed):
        from megatron.core.tensor_parallel import get_cuda_rng_tracker

        with CpuShim().install(seed=seed):
            with get_cuda_rng_tracker().fork():
                return torch.rand(4)

    assert torch.equal(draw(1), draw(1))
    assert not torch.equal(draw(1), draw(2))
