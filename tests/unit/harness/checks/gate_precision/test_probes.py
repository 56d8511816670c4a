"""gate-precision's measurements on small modules written here: the dtype a forward sees under FSDP2 per
parameter (bf16 in a bf16 unit, float32 in a float32 unit, whoever reads it), the one-rank group the check makes and
removes, and dt_bias moved off bf16's grid."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from harness.checks.gate_precision import probes

BF16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
FP32 = MixedPrecisionPolicy(param_dtype=torch.float32, output_dtype=torch.bfloat16)


@pytest.fixture(autouse=True)
def no_group():
    torch.set_num_threads(1)
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")


class Mixer(nn.Module):
    """A gate read in the forward and a child whose weight is read without calling it, as Qwen3.5's mixer does."""

    def __init__(self):
        super().__init__()
        self.A_log = nn.Parameter(torch.linspace(-4.0, 2.0, 4))
        self.conv = nn.Linear(4, 4, bias=False)

    def forward(self, x):
        return x @ self.conv.weight.t().to(x.dtype) * self.A_log.float().exp().to(x.dtype)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.mixer, self.proj = Mixer(), nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(self.mixer(x))


def _seen(layout) -> dict[str, str]:
    model = nn.Sequential(Layer())
    with probes.one_rank_mesh("cpu", "gloo") as mesh:
        layout(model, mesh)
        recorder = probes.ForwardDtypes(model)
        model(torch.ones(2, 4))
        recorder.close()
    return recorder.seen


def test_a_bf16_unit_is_seen_in_bf16_and_a_float32_unit_in_float32():
    def plain(model, mesh):
        fully_shard(model[0], mesh=mesh, mp_policy=BF16)
        fully_shard(model, mesh=mesh, mp_policy=BF16)

    def mixer_fp32(model, mesh):
        fully_shard(model[0].mixer, mesh=mesh, mp_policy=FP32)
        plain(model, mesh)

    assert _seen(plain) == {"0.mixer.A_log": "bfloat16", "0.mixer.conv.weight": "bfloat16",
                            "0.proj.weight": "bfloat16", "0.proj.bias": "bfloat16"}
    # conv's forward never runs; its weight is seen where its unit (the mixer's) gathered it
    assert _seen(mixer_fp32) == {"0.mixer.A_log": "float32", "0.mixer.conv.weight": "float32",
                                 "0.proj.weight": "bfloat16", "0.proj.bias": "bfloat16"}


def test_without_fsdp_every_parameter_is_seen_as_it_is():
    assert set(_seen(lambda model, mesh: None).values()) == {"float32"}


def test_the_one_rank_group_is_removed_and_a_group_already_there_is_kept():
    with probes.one_rank_mesh("cpu", "gloo") as mesh:
        assert dist.is_initialized() and mesh.size() == 1
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with probes.one_rank_mesh("cpu", "gloo"):
            pass
        assert dist.is_initialized()  # not ours to remove
    finally:
        dist.destroy_process_group()


def test_dt_bias_is_moved_off_the_bf16_grid():
    model = nn.Module()
    model.dt_bias = nn.Parameter(torch.ones(16))  # transformers' initial value: exact in bf16
    model.A_log = nn.Parameter(torch.zeros(16))
    probes.off_the_bf16_grid(model, seed=0)
    assert bool((model.dt_bias.data.to(torch.bfloat16).float() != model.dt_bias.data).all())
    assert bool((model.A_log.data == 0).all())  # A_log is left as it is
