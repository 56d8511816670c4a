"""trainers.runtime.device: a CPU trainer flushes denormals and runs one thread; AdamW's kernel per device and
sharding."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_a_cpu_trainer_flushes_denormals_and_runs_one_thread():
    from trainers.runtime.device import cpu_trainer_settings

    torch.set_flush_denormal(False)  # first: a test before this one in the process may have left it on
    tiny = torch.tensor([1e-40])  # below float32's smallest normal: a denormal
    assert float(tiny * 1.0) != 0.0  # by default arithmetic keeps it
    try:
        if not cpu_trainer_settings():
            pytest.skip("this CPU cannot flush denormals (no SSE3)")
        assert float(tiny * 1.0) == 0.0 and float(torch.exp(torch.tensor([-100.0]))) == 0.0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
    assert float(tiny * 1.0) != 0.0


def test_adamw_is_fused_on_plain_tensors_and_foreach_on_sharded_ones_and_npu():
    from trainers.runtime.device import DevicePlan

    cpu, npu = DevicePlan("cpu", "gloo", False, False), DevicePlan("npu", "hccl", True, True)
    assert cpu.optimizer_kernel(sharded=False) == {"fused": True}
    assert cpu.optimizer_kernel(sharded=True) == {"foreach": True}
    assert npu.optimizer_kernel(sharded=False) == {"foreach": True}
    weight = torch.nn.Parameter(torch.ones(3))
    weight.grad = torch.ones(3)
    torch.optim.AdamW([weight], lr=0.1, **cpu.optimizer_kernel(sharded=False)).step()  # this torch has it on CPU
    assert float(weight.detach()[0]) < 1.0
