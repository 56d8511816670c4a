"""The HF <-> Megatron mapping (exact round trips), the packed-batch refusal, and bridge-parity."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from trainers.megatron.config import MegatronTrainConfig, PackedBatchesRefused, resolve

HAVE_MEGATRON = (importlib.util.find_spec("megatron") is not None
                 and importlib.util.find_spec("megatron.core") is not None)


@pytest.mark.parametrize("layout", [{"use_remove_padding": True}, {"packed": True}, {"qkv_format": "thd"}])
def test_packed_configurations_are_refused(layout):
    with pytest.raises(PackedBatchesRefused, match="BSHD"):
        MegatronTrainConfig(**layout).validate()


def test_packed_flag_is_refused_on_the_command_line():
    with pytest.raises(PackedBatchesRefused):
        resolve(["--use-remove-padding"])
    assert resolve(["--no-use-remove-padding", "--tp", "2"]).tp == 2


def test_unimplemented_parallelism_is_named():
    with pytest.raises(ValueError, match="pipeline parallelism is not implemented"):
        MegatronTrainConfig(pp=2).validate()


def _full_attention_model():
    from trainers.megatron.model import build_hf_variant

    return build_hf_variant("full-attention", {"num_hidden_layers": 2}, seed=1)


@pytest.mark.parametrize("tp", [1, 2])
def test_round_trip_is_bitwise_exact(tp):
    from trainers.megatron import bridge

    model = _full_attention_model()
    state = model.state_dict()
    shards = [bridge.hf_to_megatron(state, model.config, tp, rank) for rank in range(tp)]
    back = bridge.megatron_to_hf(shards, model.config)
    assert sorted(back) == sorted(state)
    assert all(torch.equal(back[k], state[k]) for k in state)
    # and the fused QKV really interleaves: group 0 starts with head 0's query rows, then its gate rows
    heads, groups, dim = model.config.num_attention_heads, model.config.num_key_value_heads, model.config.head_dim
    fused = torch.cat([s["decoder.layers.0.self_attention.linear_qkv.weight"] for s in shards])
    q_proj = state["model.layers.0.self_attn.q_proj.weight"]
    assert torch.equal(fused[:dim], q_proj[:dim])
    assert torch.equal(fused[(heads // groups) * dim:(heads // groups) * dim + dim], q_proj[dim:2 * dim])


def test_hybrid_layers_are_not_mapped():
    from trainers.megatron import bridge
    from trainers.megatron.model import build_hf_variant

    model = build_hf_variant("hybrid", None, seed=0)
    with pytest.raises(NotImplementedError, match="full-attention"):
        bridge.hf_to_megatron(model.state_dict(), model.config)


@pytest.mark.skipif(importlib.util.find_spec("mbridge") is None, reason="mbridge is not installed")
def test_bridge_support_records_the_real_mbridge_error():
    from trainers.megatron import bridge

    report = bridge.bridge_support(_full_attention_model().config)
    assert report["mbridge"]
    # mbridge 0.15.1 has no Qwen3.5; a release that adds it would leave no error here
    if report["mbridge_error"] is not None:
        assert "qwen3_5_text" in report["mbridge_error"]
    assert bridge.chosen_bridge(report) == bridge.PROJECT_MAPPING


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEGATRON, reason="megatron-core is not installed")
@pytest.mark.parametrize("broken", [False, True])
def test_bridge_parity_check_passes_and_fails_on_a_broken_mapping(tmp_path, broken):
    from harness.checks import CheckOptions
    from harness.checks.bridge_parity import LOGPROB_ATOL, run
    from harness.results.records import Status

    result = run(CheckOptions(backend="megatron", work_dir=tmp_path), break_mapping=broken)
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["hybrid-tp1"].status in (Status.SKIP, Status.PASS)
    if broken:
        assert result.status == Status.FAIL
        assert verdicts["full-attention-tp2"].status == Status.FAIL
        assert verdicts["full-attention-tp1"].metrics["max_abs_logprob_error"] > LOGPROB_ATOL
        assert not verdicts["full-attention-tp1"].metrics["roundtrip_exact"]
    else:
        assert result.status == Status.PASS, result.message
        for name in ("full-attention-tp1", "full-attention-tp2"):
            assert verdicts[name].metrics["max_abs_logprob_error"] <= LOGPROB_ATOL
            assert verdicts[name].metrics["roundtrip_exact"]
        assert result.metrics["bridge"]
