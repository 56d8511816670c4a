"""trainers.megatron.kernel_shim: what it binds in megatron-core where FLA and Transformer Engine are absent
(and removes again), and its l2norm is transformers' own."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core")

pytestmark = pytest.mark.slow  # importing megatron-core alone takes 10-30 s on a shared CPU


def test_kernel_shim_binds_only_what_the_absent_libraries_would_and_removes_it():
    from trainers.megatron.kernel_shim import _GDN, KernelShim, _module, fla_available, installed

    if fla_available() or installed("transformer_engine"):
        pytest.skip("FLA or Transformer Engine is installed: the shim binds nothing there")
    gdn = _module(_GDN)  # 0.16.1: ssm/gated_delta_net.py; 0.18+: ssm/gated_delta_net/common.py
    before = (gdn.HAVE_FLA, getattr(gdn, "l2norm", None))
    shim = KernelShim().install()
    try:
        assert gdn.HAVE_FLA is True and callable(gdn.l2norm)
        record = shim.record()
        assert [name.split(".")[-1] for name in record["shim_symbols"]][:2] == ["HAVE_FLA", "l2norm"]
        assert record["gated_delta_rule"] == "megatron-core torch_chunk_gated_delta_rule"
    finally:
        shim.remove()
    assert (gdn.HAVE_FLA, getattr(gdn, "l2norm", None)) == before == (False, None)
    partial = KernelShim(omit=("l2norm",)).install()
    assert "l2norm" not in " ".join(partial.supplied)
    assert getattr(gdn, "l2norm", None) is None  # left out: megatron-core's GDN forward then fails on it
    partial.remove()


def test_shim_l2norm_is_hf_s_l2norm():
    from transformers.models.qwen3_5 import modeling_qwen3_5

    from trainers.megatron.kernel_shim import l2norm

    x = torch.randn(3, 5, 2, 16, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(l2norm(x), modeling_qwen3_5.l2norm(x), atol=1e-7, rtol=0)
